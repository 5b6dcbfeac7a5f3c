"""The post-compaction guard: a short window armed right after every compaction retry, and the
compaction-storm rule over the retries themselves.

If the next ``windowSize`` tool outcomes include the same ``(toolName, argsHash, resultHash)``
triple ``windowSize`` times, compaction did not break the loop and the run is aborted with
``compaction_loop_persisted``. Outcomes that change never abort. As in the reference runtime,
every compaction retry arms it, whatever its trigger (context overflow, timeout, continuation),
and only outcomes with a result hash spend its window: a result with nothing in it does not.

Two loopguard rules on top (issue 17), because a runner that compacts again and again escaped
the reference guard, each compaction clearing its count:

- a re-arm while the window is still open keeps the counts when the loop goes on: if the first
  outcome of the new window repeats a triple already counted, the counts carry on, otherwise
  they start over (so ``[compaction, same call -> same result] x 3`` aborts);
- a compaction storm: ``stormThreshold`` compaction retries in a row, each following the one
  before with no progress in between (no tool outcome that differed from its call's previous
  outcome), abort the run with ``compaction_storm``. The count is of the earlier retries of the
  storm, like every detector's count.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("loopguard.compaction")


@dataclass(frozen=True, slots=True)
class CompactionLoop:
    tool_name: str
    sig: str
    result_hash: str
    count: int


@dataclass(slots=True)
class PostCompactionGuard:
    remaining: int = 0  # attempts left in the armed window; 0 = disarmed
    window: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    carried: bool = False  # counts came from the window before a re-arm; the next outcome decides
    # compaction storm: a retry has happened; an outcome made progress since the last one;
    # earlier retries of the current storm
    compacted: bool = False
    progressed: bool = False
    storm: int = 0

    @property
    def armed(self) -> bool:
        return self.remaining > 0

    def arm(self, window_size: int, run_id: str = "", carry: bool = True) -> None:
        """Open a window of ``window_size`` attempts; an open window's counts are carried
        (unless ``carry`` is false: ``deviations.carryGuardCounts``, the reference resets)."""
        self.carried = carry and self.remaining > 0 and bool(self.counts)
        if not self.carried:
            self.counts = {}
        self.remaining = self.window = window_size
        log.info("post-compaction guard armed for %d attempts (run %s)", window_size, run_id)

    def compaction(self) -> int:
        """Count one compaction retry for the storm rule; returns the storm's earlier retries."""
        self.storm = self.storm + 1 if self.compacted and not self.progressed else 0
        self.compacted, self.progressed = True, False
        return self.storm

    def outcome(self, progress: bool) -> None:
        """A tool outcome happened; ``progress`` when it differed from its call's last one."""
        if progress:
            self.progressed = True

    def observe(self, tool_name: str, sig: str, result_hash: str | None) -> CompactionLoop | None:
        """Count one tool outcome inside the window; return the loop once it persists."""
        if not self.armed or result_hash is None:
            return None
        self.remaining -= 1
        hit = None
        triple = f"{sig}\x00{result_hash}"
        if self.carried:
            self.carried = False
            if triple not in self.counts:  # the loop did not go on: a fresh count
                self.counts = {}
        seen = self.counts.get(triple, 0) + 1
        self.counts[triple] = seen
        if seen >= self.window:
            hit = CompactionLoop(tool_name, sig, result_hash, seen)
        if hit is not None or self.remaining == 0:
            self.remaining = 0
            self.counts = {}
        return hit

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "remaining": self.remaining,
            "window": self.window,
            "counts": dict(self.counts),
        }
        if self.carried or self.compacted:  # written only once a compaction happened
            data["storm"] = [self.carried, self.compacted, self.progressed, self.storm]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PostCompactionGuard:
        guard = cls(data["remaining"], data["window"], dict(data["counts"]))
        if "storm" in data:  # states written before issue 17 have none
            guard.carried, guard.compacted, guard.progressed, guard.storm = data["storm"]
        return guard
