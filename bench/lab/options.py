"""Command-line options the benches share."""

from __future__ import annotations


def comma_list(text: str, allowed: tuple[str, ...]) -> list[str] | None:
    """The names a comma-separated option gives, in its order; None when it gives none, one
    not in ``allowed``, or one twice (the caller's parser names the option in its error)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or set(names) - set(allowed) or len(set(names)) < len(names):
        return None
    return names
