"""The one error every config check raises (its own module so that config.py and
tool_config.py, which config.py imports, can both raise it), and the unknown-key message
they share: a typo is refused with the closest known key (issue 27)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field path."""


def closest(key: object, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known key ``key`` most likely meant (difflib, case ignored), if any is close."""
    if not isinstance(key, str):
        return None
    names = list(known)
    lowered = {name.lower(): name for name in names}
    if key.lower() in lowered:
        return lowered[key.lower()]
    found = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[found[0]] if found else None


def unknown_field(where: str, key: object, known: Iterable[str]) -> ConfigError:
    """``where: unknown field; did you mean "x"? (known: a, b, c)``."""
    names = list(known)
    guess = closest(key, names)
    hint = f'; did you mean "{guess}"?' if guess is not None else ""
    return ConfigError(f"{where}: unknown field{hint} (known: {', '.join(names)})")
