"""The export file format: one event per line as JSON, in ``event_to_dict`` form.

``loopguard export`` writes it and ``loopguard replay --from-file`` reads it back; a bad line is
refused with what is wrong with it, so a hand-edited file cannot feed the core surprise types.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, TextIO

from streams.core.events import EVENT_KINDS, AgentEvent, event_from_dict, event_to_dict


def _check_types(data: dict[str, Any]) -> None:
    """Reject wrongly typed fields up front, so nothing downstream meets a surprise type."""
    cls = EVENT_KINDS.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown event kind {data.get('kind')!r}")
    for name in ("run_id", "seq"):
        if name not in data:
            raise ValueError(f"missing field {name!r}")
    for name in ("seq", "event_time"):
        value = data.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"field {name!r}: expected a whole number, got {value!r}")
    if not isinstance(data["run_id"], str) or not data["run_id"]:
        raise ValueError(f"field 'run_id': expected a non-empty string, got {data['run_id']!r}")
    for name in ("agent_id", "gateway_id"):
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"field {name!r}: expected a string, got {value!r}")
    for f in dataclass_fields(cls):
        if f.name == "envelope" or f.name not in data:
            continue
        value = data[f.name]
        optional = f.default is None  # not f.type: annotations do not survive mypyc (setup.py)
        if not (isinstance(value, str) or (optional and value is None)):
            want = "a string or null" if optional else "a string"
            raise ValueError(f"field {f.name!r}: expected {want}, got {value!r}")


def parse_event_line(text: str) -> AgentEvent:
    """One export line → event; ``ValueError`` says what is wrong with it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    _check_types(data)
    return event_from_dict(data)


def write_event_lines(events: Iterable[AgentEvent], out: TextIO) -> set[str]:
    """Write events as JSON lines; returns the run ids written."""
    runs: set[str] = set()
    for event in events:
        runs.add(event.envelope.run_id)
        out.write(json.dumps(event_to_dict(event), ensure_ascii=False) + "\n")
    return runs


def write_events_atomically(path: Path, events: Iterable[AgentEvent]) -> set[str]:
    """:func:`write_event_lines` to ``path`` through a temporary file, renamed when complete,
    so a failed export never leaves a half-written file behind."""
    directory = path.resolve().parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            runs = write_event_lines(events, handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return runs
