"""The export file format: one event per line as JSON, in ``event_to_dict`` form.

``loopguard export`` writes it and ``loopguard replay --from-file`` reads it back; a bad line is
refused with what is wrong with it (checked by the Avro codec, as the gateway's events are), so a
hand-edited file cannot feed the core surprise types.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from streams.core.events import AgentEvent, event_to_dict
from streams.core.operator_command import (
    COMMAND_KIND,
    OperatorCommand,
    command_from_dict,
    command_to_dict,
)

# What an export line holds: a gateway's event, or an operator's command (issue 43).
Input = AgentEvent | OperatorCommand


def parse_event_line(text: str) -> Input:
    """One export line → event; ``ValueError`` says what is wrong with it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    if data.get("kind") == COMMAND_KIND:  # an operator's release or abort (issue 43)
        return command_from_dict(data)
    # Deferred: the codec (fastavro) loads only when a file is really read.
    from streams.wire.avro import event_from_dict_checked

    return event_from_dict_checked(data)  # checked as the codec checks what it writes


def write_event_lines(events: Iterable[Input], out: TextIO) -> set[str]:
    """Write events as JSON lines; returns the run ids written."""
    runs: set[str] = set()
    for event in events:
        runs.add(event.envelope.run_id)
        data = (
            command_to_dict(event) if isinstance(event, OperatorCommand) else event_to_dict(event)
        )
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
    return runs


def write_events_atomically(path: Path, events: Iterable[Input]) -> set[str]:
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
