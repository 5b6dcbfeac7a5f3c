"""Checks on the text a worker stores: names it can key, index and write to SQL, and strings
that are real Unicode. The encoder checks names, so a gateway hears of a bad one at once; the
decoder checks both, so a worker refuses them before they reach the audit trail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from streams.wire.errors import InvalidDatumError

# Names that become keys, indexed SQL columns and decision text: PostgreSQL refuses NUL in
# text and cannot index a value over ~2.7 KB, so a hostile id could stall the audit trail.
NAME_MAX_BYTES = 1024
# ``turn_id`` (issue 44) is no column, but a run's state holds it while its turn lasts.
_NAME_FIELDS = (
    "run_id",
    "agent_id",
    "gateway_id",
    "tool_name",
    "session_id",
    "chain_id",
    "turn_id",
)
ENVELOPE_TEXT = ("run_id", "agent_id", "gateway_id", "session_id", "chain_id")


def require_storable_names(record: str, *sources: Mapping[str, Any]) -> None:
    """No NUL and at most NAME_MAX_BYTES of UTF-8 in any name field of ``sources``."""
    for values in sources:
        for name in _NAME_FIELDS:
            value = values.get(name)
            if not isinstance(value, str):
                continue
            if "\x00" in value:
                raise InvalidDatumError(f"{record}.{name} contains a NUL character")
            if len(value) * 4 <= NAME_MAX_BYTES:
                continue  # at most 4 UTF-8 bytes a character: fits without encoding it
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > NAME_MAX_BYTES:
                raise InvalidDatumError(
                    f"{record}.{name} is {size} bytes long, over the {NAME_MAX_BYTES}-byte limit"
                )


def require_unicode(record: str, values: Mapping[str, Any], names: Iterable[str]) -> None:
    """Strings must be real Unicode: lone surrogates (from invalid UTF-8) could not be
    written back out to the changelog, the control topic or SQL, so refuse them here."""
    for name in names:
        value = values[name]
        # isascii reads a flag CPython keeps on every string: ASCII text holds no surrogate,
        # so only other text is encoded to find one (an event's longest strings are ASCII).
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidDatumError(
                    f"{record}.{name} is not valid UTF-8 text (lone surrogate)"
                ) from None
