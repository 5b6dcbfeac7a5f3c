"""The check shared by the small config blocks (``agentCycles``, ``incidents``,
``deviations``): an object of known fields, each a true/false switch or a whole number >= 1,
refused with one :class:`ConfigError` that names the field's path."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

from streams.core.config_error import ConfigError, unknown_field


def checked_fields(
    value: Any, where: str, known: Collection[str], switches: Collection[str]
) -> Iterator[tuple[str, str, Any]]:
    """``(path, field, value)`` for each field of the block at ``where`` once it is checked:
    ``switches`` are true/false, the other ``known`` fields whole numbers >= 1. A caller with
    a rule of its own (a maximum) applies it per field, so the first bad field is the one
    reported, in the block's order."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object, got {type(value).__name__}")
    for name, setting in value.items():
        at = f"{where}.{name}"
        if name not in known:
            raise unknown_field(at, name, known)
        if name in switches:
            if not isinstance(setting, bool):
                raise ConfigError(f"{at}: expected true or false, got {setting!r}")
        elif isinstance(setting, bool) or not isinstance(setting, int) or setting < 1:
            raise ConfigError(f"{at}: expected a whole number >= 1, got {setting!r}")
        yield at, name, setting


def check_block(value: Any, where: str, known: Collection[str], switches: Collection[str]) -> None:
    """Refuse a block with an unknown field or a value of the wrong type (see above)."""
    for _checked in checked_fields(value, where, known, switches):
        pass
