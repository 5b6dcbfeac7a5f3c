"""A released run's window of warnings only (issue 43): after an operator's release, the run's
next ``calls`` tool calls (or its events before ``until``, in event time) draw warnings where
the detectors would block or abort; then the guard resumes as before.

Kept in the run's state, so a worker that takes the run over, and replay, judge alike; judged
on the events' own time, never a clock, for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from streams.core.events import Action, Decision


@dataclass(slots=True)
class ReleaseWindow:
    """What a release left open: its id, the calls it still covers (None: no call limit), the
    event time it ends at (None: no time limit) and who opened it."""

    release_id: str
    calls_left: int | None
    until: int | None
    released_by: str

    def covers(self, event_time: int) -> bool:
        """Whether an event at ``event_time`` still falls in the window."""
        if self.calls_left is not None and self.calls_left <= 0:
            return False
        return self.until is None or event_time < self.until

    def took_call(self) -> None:
        """One covered tool call was judged."""
        if self.calls_left is not None:
            self.calls_left -= 1

    def soften(self, decisions: list[Decision]) -> list[Decision]:
        """The decisions as warnings: a block or abort becomes a warn that says the run was
        released (and by whom), and names the action it would have drawn in ``extra``."""
        softened: list[Decision] = []
        for decision in decisions:
            if decision.action is Action.WARN or not decision.enforced:
                softened.append(decision)
                continue
            extra = dict(decision.extra)
            extra["released"] = self.release_id
            extra["would_be"] = decision.action.value
            reason = (
                f"{decision.reason} (released by {self.released_by or 'an operator'}: "
                f"warnings only, {self.describe()})"
            )
            softened.append(replace(decision, action=Action.WARN, reason=reason, extra=extra))
        return softened

    def describe(self) -> str:
        """What is left of the window, in words."""
        parts: list[str] = []
        if self.calls_left is not None:
            parts.append(f"{self.calls_left} more call(s)")
        if self.until is not None:
            at = datetime.fromtimestamp(self.until / 1000, UTC)
            parts.append(f"until {at:%Y-%m-%d %H:%M:%S}Z")
        return " or ".join(parts) if parts else "until the run ends"

    def to_list(self) -> list[Any]:
        return [self.release_id, self.calls_left, self.until, self.released_by]

    @classmethod
    def from_list(cls, row: list[Any]) -> ReleaseWindow:
        release_id, calls_left, until, released_by = row
        return cls(release_id, calls_left, until, released_by)
