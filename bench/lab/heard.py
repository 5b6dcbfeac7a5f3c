"""What a benchmark's gateway hears: every decision with its arrival time, and the sentinel
runs (one per partition, produced last) whose decisions say everything before was processed."""

from __future__ import annotations

import threading
import time

from kafka.partitioner.default import murmur2

from streams.core.events import Decision


def sentinel_ids(prefix: str, partitions: int) -> list[str]:
    """One run id per partition (same murmur2 as the producers), to mark 'all processed'."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        run_id = f"{prefix}-sentinel-{i}"
        found.setdefault((murmur2(run_id.encode()) & 0x7FFFFFFF) % partitions, run_id)
        i += 1
    return list(found.values())


class Decisions:
    """What the gateway client hears, with arrival times (the ``on_decision`` callback)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.by_event: dict[tuple[str, int], float] = {}  # (run, seq) → first arrival
        self.by_run: dict[str, float] = {}  # run → first arrival
        self.count = 0

    def __call__(self, decision: Decision) -> None:
        now = time.perf_counter()
        with self.cond:
            self.count += 1
            self.by_event.setdefault((decision.run_id, decision.seq), now)
            self.by_run.setdefault(decision.run_id, now)
            self.cond.notify_all()

    def wait_runs(self, run_ids: list[str], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: all(r in self.by_run for r in run_ids), timeout)
