"""Each call signature's identical-outcome streak across a whole run, whatever runs between.

The window detectors only see a run's last ``historySize`` calls, and their streaks stop at
nothing else than another outcome of the same call. An agent stuck in "edit, re-run, same
output" spends three to five calls per round, so a window of 30 holds fewer re-runs than the
block threshold needs; this memory keeps, per signature, how many outcomes in a row were the
same, so the ``unchanged_outcome`` rule (streams.core.progress) can see the whole streak. A
repeat counts only while it comes within one window of the previous one (a check repeated
every hour in a long healthy session is no loop), and the memory is bounded: the signature
seen longest ago is forgotten first.

An outcome with nothing in it (a command that printed nothing, a bare ``null``) tells the
agent nothing new whether it repeats or not (``rm file``, ``mkdir``, ``cd``): it neither
extends nor ends a streak. Edits between the repeats are counted for the decision's reason.
"""

from __future__ import annotations

from typing import Any

# Signatures remembered per run; the least recently repeated one goes first.
MAX_SIGNATURES = 256
# Tools whose successful result changed something the agent's next run of a command can see.
CHANGING_TOOLS = frozenset({"edit", "write", "apply_patch", "multiedit", "str_replace"})


class OutcomeStreak:
    """One signature's streak: its last outcome, how many in a row, since which call."""

    __slots__ = ("result_hash", "count", "first_index", "last_index", "changes_at_first")

    def __init__(
        self,
        result_hash: str,
        count: int,
        first_index: int,
        last_index: int,
        changes_at_first: int,
    ) -> None:
        self.result_hash = result_hash
        self.count = count  # identical outcomes in a row, other calls between ignored
        self.first_index = first_index  # the call (0-based, in the run) that began the streak
        self.last_index = last_index  # the call that last extended it
        self.changes_at_first = changes_at_first  # OutcomeMemory.changes when it began

    def to_list(self) -> list[Any]:
        return [
            self.result_hash,
            self.count,
            self.first_index,
            self.last_index,
            self.changes_at_first,
        ]


class OutcomeMemory:
    """Per-signature streaks of one run plus its count of changing calls (edits, writes)."""

    __slots__ = ("streaks", "changes")

    def __init__(self) -> None:
        self.streaks: dict[str, OutcomeStreak] = {}  # insertion order: oldest repeat first
        self.changes = 0

    def get(self, sig: str) -> OutcomeStreak | None:
        return self.streaks.get(sig)

    def record(
        self, sig: str, result_hash: str, index: int, within: int, informative: bool
    ) -> None:
        """The call at ``index`` with signature ``sig`` had outcome ``result_hash``.

        ``within``: the most calls a repeat may come after the previous one and still extend
        the streak (the history window); ``informative`` false: an empty outcome (see the
        module doc), which leaves the streak as it is.
        """
        if not informative:
            return
        streaks = self.streaks
        streak = streaks.get(sig)
        if (
            streak is not None
            and streak.result_hash == result_hash
            and 0 <= index - streak.last_index <= within
        ):
            streak.count += 1
            streak.last_index = index
            del streaks[sig]  # moved to the end: the newest repeat is forgotten last
            streaks[sig] = streak
            return
        if streak is not None:
            del streaks[sig]
        elif len(streaks) >= MAX_SIGNATURES:
            del streaks[next(iter(streaks))]
        streaks[sig] = OutcomeStreak(result_hash, 1, index, index, self.changes)

    def changed(self, tool_name: str) -> None:
        """A call of ``tool_name`` succeeded; an edit or write counts as a change."""
        if tool_name in CHANGING_TOOLS:
            self.changes += 1

    def to_list(self) -> list[Any]:
        return [self.changes, [[sig, *streak.to_list()] for sig, streak in self.streaks.items()]]

    @classmethod
    def from_list(cls, data: list[Any]) -> OutcomeMemory:
        memory = cls()
        memory.changes = int(data[0])
        for sig, result_hash, count, first, last, changes in data[1]:
            memory.streaks[sig] = OutcomeStreak(result_hash, count, first, last, changes)
        return memory

    def copy(self) -> OutcomeMemory:
        """An independent copy (a session's next run carries it over)."""
        return OutcomeMemory.from_list(self.to_list())
