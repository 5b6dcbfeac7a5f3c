"""Each call signature's identical-outcome streak across a whole run, whatever runs between.

The window detectors only see a run's last ``historySize`` calls, and their streaks stop at
nothing else than another outcome of the same call. An agent stuck in "edit, re-run, same
output" spends three to five calls per round, so a window of 30 holds fewer re-runs than the
block threshold needs; this memory keeps, per signature, how many outcomes in a row were the
same, so the ``unchanged_outcome`` rule (streams.core.progress) can see the whole streak.

A repeat counts only while it comes within one window of the previous one (a check repeated
every hour in a long healthy session is no loop). So a streak starts from two identical
outcomes both in the window: the window itself remembers single outcomes, and only streaks of
two or more are kept here, which keeps the run's state (written to the changelog on every
batch) as small as before for ordinary work. A streak that can no longer be extended is
dropped, and at most :data:`MAX_SIGNATURES` are kept.

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

    def extend(self, sig: str, result_hash: str, index: int, within: int) -> bool:
        """The call at ``index`` had outcome ``result_hash``: extend its streak and say so, or
        forget a streak it ends (False: the caller looks for a new one in the window)."""
        streaks = self.streaks
        streak = streaks.get(sig)
        if streak is None:
            return False
        del streaks[sig]
        if streak.result_hash != result_hash or not 0 <= index - streak.last_index <= within:
            return False
        streak.count += 1
        streak.last_index = index
        streaks[sig] = streak  # moved to the end: ordered by their last repeat
        return True

    def begin(
        self, sig: str, result_hash: str, first_index: int, index: int, changes_at_first: int
    ) -> None:
        """A second identical outcome in a row (the first at ``first_index``, in the window)."""
        streaks = self.streaks
        if len(streaks) >= MAX_SIGNATURES:
            del streaks[next(iter(streaks))]
        streaks[sig] = OutcomeStreak(result_hash, 2, first_index, index, changes_at_first)

    def drop_stale(self, index: int, within: int) -> None:
        """Forget the streaks whose last repeat is more than ``within`` calls before ``index``:
        no later repeat can extend them (the oldest come first)."""
        streaks = self.streaks
        while streaks:
            sig = next(iter(streaks))
            if index - streaks[sig].last_index <= within:
                return
            del streaks[sig]

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
