"""An idle worker's fetch wait, backed off while nothing arrives (issue 42).

On the tansu profile the worker's consumer asks with a 5 ms fetch wait, because tansu holds an
empty fetch for the whole wait even when records arrive meanwhile (streams.settings): prompt
decisions, but with no traffic at all that is ~200 fetch requests a second over every assigned
partition, which kept an idle worker at ~11% of a core and the broker at ~22% (docs/benchmarks.md,
"Idle cost"). :class:`FetchBackoff` keeps the profile's wait while records come and for
``GRACE_SECONDS`` after the last, then doubles it every further second without a record, up
to ``LOOPGUARD_IDLE_FETCH_MAX_WAIT_MS``; the first records bring it back. Under load nothing
changes; the first event after an idle spell waits at most the backed-off wait. Where the idle
cap is not above the profile's wait (the kafka profile: Apache Kafka answers a fetch as soon as
data arrives) it changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from streams.worker.faust_patches import set_consumer_fetch_wait

GRACE_SECONDS = 2.0  # a pause this short keeps the profile's wait


class FetchBackoff:
    """The fetch wait a consumer should use now, from ``base_ms`` up to ``idle_max_ms``."""

    def __init__(
        self, base_ms: int, idle_max_ms: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.base_ms = base_ms
        self.idle_max_ms = max(base_ms, idle_max_ms)
        self.clock = clock
        self.wait_ms = base_ms
        self.last_records_at = clock()

    def next_wait(self, got_records: bool) -> int:
        """The wait after a fetch that handed over records (the profile's) or none (doubled
        every second past the grace since the last records, at most ``idle_max_ms``)."""
        now = self.clock()
        if got_records:
            self.last_records_at = now
        idle = now - self.last_records_at - GRACE_SECONDS
        if idle < 0:
            self.wait_ms = self.base_ms
        else:
            doublings = min(int(idle) + 1, 32)
            self.wait_ms = min(self.idle_max_ms, max(1, self.base_ms) << doublings)
        return self.wait_ms

    def after_fetch(self, consumer: Any, got_records: bool) -> None:
        """Set the aiokafka ``consumer``'s next fetch requests' wait when it changes."""
        before = self.wait_ms
        if self.next_wait(got_records) != before:
            set_consumer_fetch_wait(consumer, self.wait_ms)
