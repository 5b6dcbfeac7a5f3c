"""When a run's state may leave the worker's table, so memory tracks live runs only.

A run is idle on two clocks, and an active run must be idle on both before it goes:

- processing time: how long since this worker last applied one of the run's events;
- event time: how far the run's last event lies behind the newest event this worker has
  seen (the watermark, never ahead of the worker's own clock, so one gateway with a fast
  clock cannot age everyone else's runs).

Processing time alone would drop the runs of a worker working through a backlog (their
next events are queued, just not read yet), and their later events would then wait for a
seq 1 that never comes again; event time alone would drop the live runs of a gateway whose
clock runs late. A run that ended or was aborted only waits out a short grace period for
stragglers and redeliveries.

A run's event time counts at most its arrival time (the wall clock when this worker last saw
it): a gateway that stamps events in the future (or garbage event times) would otherwise
keep its runs "current" in event time until that future came, held in memory and in the
compacted changelog across restarts. The watermark is capped at the wall clock too, so with
both capped such a run ages like any other once it stops sending.

When the table holds more runs than its cap (``LOOPGUARD_MAX_RUNS``), or a gateway more than
its quota (``LOOPGUARD_MAX_RUNS_PER_GATEWAY``), :meth:`RunExpiry.evictions` picks who goes
(streams.state.eviction): ended runs, then the runs of the gateway holding the most, a run
with a warning, block or abort in force only when nothing else is left.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from streams.state.eviction import choose_evictions

ENDED_GRACE_SECONDS = 300.0
CAP_WARNING_SECONDS = 60.0  # at most one "at the cap" WARNING a minute


@dataclass
class RunExpiry:
    idle_ttl: float  # seconds
    ended_grace: float = ENDED_GRACE_SECONDS
    watermark_ms: int = 0
    last_touched: dict[Hashable, float] = field(default_factory=dict)
    cap_warned_at: float | None = None  # when the last "at the cap" WARNING was logged

    def observe(self, event_time_ms: int, now: float) -> None:
        """Advance the watermark with an event's time, capped at ``now``.

        ``now`` is wall-clock seconds (``time.time()``) here and in the other methods.
        """
        self.watermark_ms = max(self.watermark_ms, min(event_time_ms, int(now * 1000)))

    def touch(self, run_id: Hashable, now: float) -> None:
        self.last_touched[run_id] = now

    def reason(
        self, run_id: Hashable, active: bool, last_event_time_ms: int, now: float
    ) -> str | None:
        """Why the run may be dropped now (``"ended"`` / ``"idle"``), or None to keep it.

        A run this worker has not touched yet (e.g. recovered from the changelog after a
        rebalance) starts its processing-time clock now.
        """
        arrived = self.last_touched.setdefault(run_id, now)
        idle = now - arrived
        if not active:
            return "ended" if idle > min(self.ended_grace, self.idle_ttl) else None
        event_time_ms = min(last_event_time_ms, int(arrived * 1000))  # never in the future
        behind = (self.watermark_ms - event_time_ms) / 1000
        return "idle" if idle > self.idle_ttl and behind > self.idle_ttl else None

    def least_recent(self, n: int) -> list[Hashable]:
        """The ``n`` runs this worker saw longest ago (oldest first): whom a cap on the runs
        held would drop first, when the table grows past it."""
        if n <= 0:
            return []
        return heapq.nsmallest(n, self.last_touched, key=self.last_touched.__getitem__)

    def evictions(
        self,
        classes: Mapping[Hashable, str],
        cap: int,
        owners: Mapping[Hashable, str] | None = None,
        quota: int = 0,
    ) -> list[tuple[Hashable, str]]:
        """Whom to evict, with why, so that at most ``cap`` of the runs in ``classes`` (run id
        → :func:`streams.state.eviction.eviction_class`) remain and no gateway (``owners``:
        run id → gateway id) holds more than ``quota``; 0 turns either off. The order is
        :func:`streams.state.eviction.choose_evictions`'s, least recently active by
        :meth:`touch` (a run never touched counts as oldest)."""
        return choose_evictions(classes, owners or {}, self.last_touched, cap, quota)

    def cap_warning_due(self, now: float) -> bool:
        """Whether to log the "at the cap" WARNING now (at most once a minute); notes it."""
        if self.cap_warned_at is not None and now - self.cap_warned_at < CAP_WARNING_SECONDS:
            return False
        self.cap_warned_at = now
        return True

    def forget(self, run_id: Hashable) -> None:
        self.last_touched.pop(run_id, None)

    def retain(self, run_ids: set[Hashable]) -> None:
        """Forget runs no longer in the table (e.g. their partition moved to another worker)."""
        for run_id in self.last_touched.keys() - run_ids:
            del self.last_touched[run_id]
