"""What every format reader produces: a run's tool calls, mapped to OpenClaw's tools, with their
results and the times and token usage the source recorded.

The readers know their format; everything after them (events, labels, the outcomes file) sees
only these types.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

RESOLVED, UNRESOLVED, UNKNOWN = "resolved", "unresolved", "unknown"


class TrajectoryError(ValueError):
    """A file is not a valid trajectory of the format; the message says why, in a few words."""


@dataclass(frozen=True, slots=True)
class ImportedCall:
    """One tool call and what came back. ``returned`` false: the source shows no result (the
    run ended first, e.g. at the step limit), so only the call is replayed."""

    tool_name: str
    args: dict[str, Any]
    call_id: str | None = None
    result: Any = None  # OpenClaw-shaped result object; unused when ``error`` is set
    error: str | None = None
    returned: bool = True
    called_at: int | None = None  # epoch ms, where the source has times
    returned_at: int | None = None
    input_tokens: int | None = None  # the model turn's usage, on its first call only
    output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ImportedRun:
    """One trajectory. ``own_outcome`` is the label the trajectory itself carries (resolved or
    unresolved), None where it has none; ``source`` is filled in by the batch."""

    run_id: str
    calls: tuple[ImportedCall, ...]
    started_at: int | None = None
    ended_at: int | None = None
    own_outcome: str | None = None
    source: str = ""


class CallLog:
    """A run's calls in the order they were asked, each result matched to its call by a key
    (the source's call id, or a position) when it comes; a call never answered stays
    ``returned=False``."""

    def __init__(self) -> None:
        self.calls: list[ImportedCall] = []
        self.pending: dict[object, int] = {}

    def ask(self, call: ImportedCall, key: object = None) -> None:
        if key is not None:
            self.pending[key] = len(self.calls)
        self.calls.append(replace(call, returned=False))

    def answer(
        self, key: object, result: Any = None, error: str | None = None, at: int | None = None
    ) -> bool:
        """Record the result of the call asked under ``key``; False when none waits for it."""
        index = self.pending.pop(key, None)
        if index is None:
            return False
        self.calls[index] = replace(
            self.calls[index], result=result, error=error, returned=True, returned_at=at
        )
        return True

    def waiting(self) -> list[object]:
        """Keys of the calls still waiting for a result, oldest first."""
        return sorted(self.pending, key=self.pending.__getitem__)
