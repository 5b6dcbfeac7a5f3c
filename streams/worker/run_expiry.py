"""Run expiry's sweep: drop the state of runs that ended or went idle, then evict past the
runs cap, and write their tombstones as one batch of records (moved out of
:mod:`streams.worker.agents`, which registers it on a 10 s timer)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from streams.core.run_state import ACTIVE
from streams.service.records import OutRecord, TopicPartition
from streams.state.eviction import QUOTA, eviction_class
from streams.worker.checkpoint import Checkpoint
from streams.worker.fast_failover import forget
from streams.worker.parts import WorkerParts

log = logging.getLogger("loopguard.worker")


class ExpirySweep:
    """One sweep over this worker's runs table, between the guarding agent's batches."""

    def __init__(self, parts: WorkerParts, checkpoint: Checkpoint) -> None:
        self.parts = parts
        self.settings = parts.settings
        self.checkpoint = checkpoint

    async def sweep(self) -> None:
        """Drop state of runs that ended or went idle (see streams.state.expiry), and say so.

        In session scope a session's latest run is kept, ended or not, until it is idle like an
        active run: the session's next run seeds from it.

        Then, past ``LOOPGUARD_MAX_RUNS_PER_GATEWAY`` for a gateway or ``LOOPGUARD_MAX_RUNS``
        for the table, evict runs as ``RunExpiry.evictions`` orders them (the gateway's own
        first; ended ones, then the largest holders' idle, then enforced ones), the same way."""
        runs, sessions, expiry = self.parts.runs, self.parts.sessions, self.parts.expiry
        now, cap = time.time(), self.settings.max_runs
        quota = self.settings.max_runs_per_gateway
        dropped: Counter[str] = Counter()
        evicted: Counter[str] = Counter()
        classes: dict[Any, str] = {}  # the runs kept: their eviction class
        owners: dict[Any, str] = {}  # and their gateway
        held: dict[Any, tuple[Any, bool]] = {}  # and their state, and whether a session's latest
        tombstones: dict[TopicPartition, list[OutRecord]] = {}
        # Between batches: exactly once, the deletions are committed here on their own (no
        # event's offsets carry them), and a half-published batch must not go with them.
        # Only runs of partitions active here: the table also holds standby copies of other
        # workers' runs (LOOPGUARD_STANDBY_REPLICAS), which their owners expire.
        owned = self.parts.app.assignor.assigned_actives()
        async with self.parts.commit_barrier:
            for run_id, state in list(runs.items()):
                if runs.changelog_tp(run_id, state) not in owned:
                    continue
                session_key = state.session_id.encode()
                latest = bool(session_key) and sessions.get(session_key) == run_id
                kept = latest and self.parts.processor.config_for(state.agent_id).session_scope
                active = state.status == ACTIVE or kept
                reason = expiry.reason(run_id, active, state.last_event_time, now)
                if reason:
                    self.drop(run_id, state, latest, tombstones)
                    dropped[reason] += 1
                elif cap > 0 or quota > 0:
                    classes[run_id] = eviction_class(state, kept)
                    owners[run_id] = state.gateway_id
                    held[run_id] = (state, latest)
            for run_id, why in expiry.evictions(classes, cap, owners, quota):
                state, latest = held[run_id]
                self.drop(run_id, state, latest, tombstones)
                evicted[why] += 1
            await self.checkpoint.write_outside_batches(tombstones)
        expiry.retain(set(runs.keys()))
        self.parts.metrics.set_runs_cap(cap)
        for why, n in evicted.items():
            self.parts.metrics.runs_evicted_for(why, n)
        if evicted and expiry.cap_warning_due(now):
            log.warning(
                "at the runs cap (LOOPGUARD_MAX_RUNS=%d, LOOPGUARD_MAX_RUNS_PER_GATEWAY=%d): "
                "evicted %d runs (%s; %s over their gateway's quota); %d runs in this worker's "
                "table (this warning at most once a minute)",
                cap,
                quota,
                evicted.total(),
                ", ".join(f"{n} {why}" for why, n in sorted(evicted.items()) if why != QUOTA)
                or "none at the cap",
                evicted[QUOTA],
                len(runs),
            )
        if dropped:
            log.info(
                "expired %d runs (%s); %d runs in this worker's table",
                dropped.total(),
                ", ".join(f"{n} {why}" for why, n in sorted(dropped.items())),
                len(runs),
            )

    def drop(
        self,
        run_id: bytes,
        state: Any,
        latest: bool,
        tombstones: dict[TopicPartition, list[OutRecord]],
    ) -> None:
        """Forget a run here (and its session's pointer to it when it is the ``latest``) and
        add its changelog tombstone, for the checkpoint to send with the others, as batches
        in its partition's transaction (a Faust table delete goes through Faust's producer
        buffer, which sends one message at a time)."""
        tp = self.parts.runs.changelog_tp(run_id, state)
        forget(self.parts.runs.data, run_id)
        source = (self.settings.topics.events, tp.partition)
        tombstone = OutRecord(tp.topic, run_id, None, tp.partition, source)
        tombstones.setdefault((tp.topic, tp.partition), []).append(tombstone)
        if latest:
            del self.parts.sessions[state.session_id.encode()]
        self.parts.expiry.forget(run_id)
