"""The A/B alternation a run's history reports at its tail: the value the ping-pong detector
reads, kept apart so the detectors need not import the history's internals to name it.
"""

from __future__ import annotations


class PingPong:
    """An A/B alternation at the tail of the window (a slotted value, like hashing.Outcome)."""

    __slots__ = ("calls", "paired_tool_name", "paired_sig", "no_progress")

    def __init__(
        self,
        calls: int = 0,
        paired_tool_name: str = "",
        paired_sig: str = "",
        no_progress: bool = False,
    ) -> None:
        self.calls = calls  # length of the alternation, the expected next call included
        self.paired_tool_name = paired_tool_name
        self.paired_sig = paired_sig
        self.no_progress = no_progress

    def _values(self) -> tuple[int, str, str, bool]:
        return (self.calls, self.paired_tool_name, self.paired_sig, self.no_progress)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PingPong) and self._values() == other._values()

    def __repr__(self) -> str:
        return f"PingPong{self._values()!r}"


NO_PING_PONG = PingPong()
