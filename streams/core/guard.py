"""The post-compaction guard: a short window armed right after every compaction retry.

If the next ``windowSize`` tool outcomes include the same ``(toolName, argsHash, resultHash)``
triple ``windowSize`` times, compaction did not break the loop and the run is aborted with
``compaction_loop_persisted``. Outcomes that change never abort. As in the reference runtime,
every compaction retry arms it, whatever its trigger (context overflow, timeout, continuation),
and only outcomes with a result hash spend its window: a result with nothing in it does not.
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

    @property
    def armed(self) -> bool:
        return self.remaining > 0

    def arm(self, window_size: int, run_id: str = "") -> None:
        self.remaining = self.window = window_size
        self.counts = {}
        log.info("post-compaction guard armed for %d attempts (run %s)", window_size, run_id)

    def observe(self, tool_name: str, sig: str, result_hash: str | None) -> CompactionLoop | None:
        """Count one tool outcome inside the window; return the loop once it persists."""
        if not self.armed or result_hash is None:
            return None
        self.remaining -= 1
        hit = None
        triple = f"{sig}\x00{result_hash}"
        seen = self.counts.get(triple, 0) + 1
        self.counts[triple] = seen
        if seen >= self.window:
            hit = CompactionLoop(tool_name, sig, result_hash, seen)
        if hit is not None or self.remaining == 0:
            self.remaining = 0
            self.counts = {}
        return hit

    def to_dict(self) -> dict[str, Any]:
        return {"remaining": self.remaining, "window": self.window, "counts": dict(self.counts)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PostCompactionGuard:
        return cls(data["remaining"], data["window"], dict(data["counts"]))
