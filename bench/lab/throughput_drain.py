"""Timing one contender of ``bench/throughput_bench.py`` as it drains its backlog.

The window runs from the first commit seen once every process holds its final partitions to
every partition committed to its end; at both ends it records the committed offsets, each
process's CPU seconds and partitions, so the events and CPU of each worker come out of it.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from bench.lab.harness import GroupProgress, cpu_seconds, owned_partitions, settled
from streams.devtools.worker_process import WorkerProcess


@dataclass
class Mark:
    """One end of the timed window."""

    at: float  # monotonic
    committed: dict[int, int]  # partition -> committed offset, capped at its backlog's end
    cpu_s: list[float]  # per process, in the contender's order
    owned: list[list[int]]  # partitions per process
    broker_cpu_s: float = 0.0  # the broker's processes together (every Kafka node, or tansu)

    @property
    def count(self) -> int:
        return sum(self.committed.values())


@dataclass
class Drain:
    first: Mark | None  # None: no commit seen after the assignment settled (one commit held all)
    last: Mark

    def events_by_partition(self) -> dict[int, int]:
        start = self.first.committed if self.first else {}
        return {p: c - start.get(p, 0) for p, c in self.last.committed.items()}

    def cpu_by_process(self) -> list[float]:
        start = self.first.cpu_s if self.first else [0.0] * len(self.last.cpu_s)
        return [end - begin for begin, end in zip(start, self.last.cpu_s, strict=True)]

    def broker_cpu(self) -> float:
        """The broker's CPU seconds over the window: beside the contender's, it says whether
        the machine's cores, not the contender, bound the rate."""
        return self.last.broker_cpu_s - (self.first.broker_cpu_s if self.first else 0.0)

    def reassigned(self) -> bool:
        """Whether a process's partitions changed inside the window (a rebalance): then its
        events are not its partitions' alone."""
        return self.first is None or self.first.owned != self.last.owned


def process_cpu(processes: list[WorkerProcess]) -> list[float]:
    """CPU seconds of each process so far, 0 for one that is gone."""
    values = []
    for process in processes:
        try:
            values.append(cpu_seconds(process.process.pid) if process.process else 0.0)
        except OSError:
            values.append(0.0)
    return values


def pids_cpu(pids: list[int]) -> float:
    """CPU seconds of these processes so far (one that is gone counts 0)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


def mark(
    processes: list[WorkerProcess],
    committed: dict[int, int],
    workers: bool,
    partitions: int,
    broker_pids: list[int],
) -> Mark:
    """Commits, CPU and partitions now; a baseline owns every partition (it logs none), an
    audit process none."""
    owned = [(owned_partitions(p) or []) if workers else list(range(partitions)) for p in processes]
    return Mark(time.monotonic(), committed, process_cpu(processes), owned, pids_cpu(broker_pids))


def time_drain(
    name: str,
    args: argparse.Namespace,
    processes: list[WorkerProcess],
    progress: GroupProgress,
    ends: dict[int, int],
    broker_pids: list[int],
) -> Drain:
    """Poll the group's commits every 50 ms. The clock starts at the first commit seen after
    every process has its final partitions (start-up, joins and rebalances stay outside) and
    stops when every partition is committed to its end, or at ``--drain-timeout`` (then the
    figure is the rate until then). Both ends fall on a commit, so the commit interval cancels
    out. An audit process (``--roles split``) owns no events partition: it must be ready too,
    and alive throughout."""
    workers = name.startswith("loopguard")
    total = sum(ends.values())
    deadline = time.monotonic() + args.drain_timeout + 180  # start-up: at most 180 s
    stable = not workers
    last_seen = None
    first: Mark | None = None
    last_report = time.monotonic()
    while True:
        dead = [p for p in processes if not p.alive]
        if dead:
            raise RuntimeError(f"{name}: a process died; see {dead[0].log_path}")
        if not stable:
            stable = settled(processes, args.partitions)
        offsets = {tp.partition: c for tp, c in progress.committed().items()}
        committed = {p: min(offsets.get(p, 0), end) for p, end in ends.items()}
        now = time.monotonic()
        count = sum(committed.values())
        if stable and first is None and last_seen is not None and count > last_seen:
            first = mark(processes, committed, workers, args.partitions, broker_pids)
        last_seen = count
        if first is not None and deadline > first.at + args.drain_timeout:
            deadline = first.at + args.drain_timeout  # --drain-timeout counts from t0
        if count >= total or now > deadline:
            return Drain(first, mark(processes, committed, workers, args.partitions, broker_pids))
        if now - last_report >= args.progress:
            last_report = now
            print(f"  [{name}] committed {count:,} of {total:,}", flush=True)
        time.sleep(0.05)


def assignments(process: WorkerProcess) -> int:
    """Partition assignments a worker logged (1 = no rebalance after it joined; an audit
    process logs none). Only this run's: lines an earlier run left in the same log (the one
    worker's idle start) carry another pid."""
    log: Path | None = process.log_path
    if process.process is None or log is None or not log.exists():
        return 0
    pid = f"[{process.process.pid}]"
    marker = "events partitions assigned to this worker"
    return sum(
        pid in line and marker in line for line in log.read_text(errors="replace").splitlines()
    )
