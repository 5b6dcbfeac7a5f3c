"""Reading a config document from text or a file: JSON5 (plain JSON too) or YAML, every
failure one :class:`ConfigError` naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.core.config_error import ConfigError


def parse_config_text(text: str, path: str | Path) -> Any:
    """The document in a config file's text: YAML when ``path`` ends in .yaml/.yml, otherwise
    JSON5 (which reads plain JSON too). Raises :class:`ConfigError` naming ``path``."""
    is_yaml = str(path).endswith((".yaml", ".yml"))
    try:
        if is_yaml:
            import yaml  # type: ignore[import-untyped]

            return yaml.safe_load(text)
        import json5

        return json5.loads(text)
    except Exception as exc:  # parser errors differ per library; report them uniformly
        kind = "YAML" if is_yaml else "JSON5/JSON"
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from None


def read_config_file(path: str | Path) -> Any:
    """The document in a JSON5, JSON or YAML file (a fleet config or one override block)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_config_text(text, path)
