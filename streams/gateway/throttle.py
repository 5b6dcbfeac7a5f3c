"""At most one log line per interval for a repeated condition, with a count of what it held back.

A gateway whose loopguard worker is slow misses the in-time wait on every tool call; one
warning per call would flood its log at hundreds of lines a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class LogThrottle:
    """``admit()`` is true once per ``interval`` seconds; ``held_back`` counts the others."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.next_at: float | None = None
        self.held_back = 0

    def admit(self) -> bool:
        now = self.clock()
        if self.next_at is not None and now < self.next_at:
            self.held_back += 1
            return False
        self.next_at = now + self.interval
        return True

    def take_held_back(self) -> int:
        """How many were held back since the last admitted one; resets the count."""
        count, self.held_back = self.held_back, 0
        return count
