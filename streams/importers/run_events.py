"""An imported run as loopguard events, in the export file's order: RunStarted, then each call's
ToolCall and ToolResult, then RunEnded.

Times are the source's where it has them (kept in order: an event never goes back in time),
else synthetic, one second apart from 0, so the same file always gives the same events.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from streams.core.events import (
    AgentEvent,
    Envelope,
    RunEnded,
    RunStarted,
    ToolCall,
    ToolResult,
)
from streams.importers.runs import ImportedRun

IMPORT_GATEWAY = "import"
SYNTHETIC_STEP_MS = 1_000


def event_times(stamps: list[int | None]) -> list[int]:
    """Each event's time: the source's, never before the previous event's; an event the source
    gives no time takes the previous one's. No time at all: 0, 1000, 2000, ..."""
    known = [stamp for stamp in stamps if stamp is not None]
    if not known:
        return [index * SYNTHETIC_STEP_MS for index in range(len(stamps))]
    times = []
    last = known[0]
    for stamp in stamps:
        if stamp is not None and stamp > last:
            last = stamp
        times.append(last)
    return times


def run_stamps(run: ImportedRun) -> list[int | None]:
    """The source times of the run's events, in event order (None where it has none)."""
    stamps: list[int | None] = [run.started_at]
    for call in run.calls:
        stamps.append(call.called_at)
        if call.returned:
            stamps.append(call.returned_at)
    stamps.append(run.ended_at)
    return stamps


def dumps(value: Any) -> str:
    """JSON as the Python gateway writes args and results."""
    return json.dumps(value, ensure_ascii=False)


def run_events(run: ImportedRun, agent_id: str) -> Iterator[AgentEvent]:
    """The run's events; ``agent_id`` is the format name, the gateway is ``import``."""
    times = iter(event_times(run_stamps(run)))
    seq = 0

    def envelope() -> Envelope:
        nonlocal seq
        seq += 1
        return Envelope(run.run_id, agent_id, IMPORT_GATEWAY, seq, next(times))

    yield RunStarted(envelope(), trigger="user")
    for number, call in enumerate(run.calls, start=1):
        call_id = call.call_id or f"call-{number}"
        args_json = dumps(call.args)
        yield ToolCall(
            envelope(),
            call.tool_name,
            args_json,
            call_id,
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
        )
        if call.returned:
            failed = call.error is not None
            yield ToolResult(
                envelope(),
                call.tool_name,
                args_json,
                result_json=None if failed else dumps(call.result),
                error=call.error,
                tool_call_id=call_id,
            )
    yield RunEnded(envelope(), status="completed")


def run_tokens(run: ImportedRun) -> int | None:
    """The run's usage tokens (input and output, every turn the source reported), or None when
    the source reported none."""
    counts = [
        count
        for call in run.calls
        for count in (call.input_tokens, call.output_tokens)
        if count is not None
    ]
    return sum(counts) if counts else None
