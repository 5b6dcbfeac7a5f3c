"""The one error every config check raises (its own module so that config.py and
tool_config.py, which config.py imports, can both raise it)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field path."""
