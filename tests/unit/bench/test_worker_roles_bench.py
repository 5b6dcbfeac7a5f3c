"""The benches' ``--roles split``: which processes own events partitions, and a worker's log
read for this run only (the one worker's idle start leaves an earlier run's lines in it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.lab.harness import event_consumers, process_role, worker_ready
from bench.lab.throughput_drain import assignments
from streams.devtools.worker_process import WorkerProcess


def finished_worker(log: Path, role: str | None) -> WorkerProcess:
    """A WorkerProcess whose process has come and gone: a real pid to find in its log."""
    env = {"LOOPGUARD_ROLE": role} if role else {}
    worker = WorkerProcess("broker", "db", log_path=log, env=env)
    worker.process = subprocess.Popen([sys.executable, "-c", "pass"])
    worker.process.wait()
    return worker


def test_only_the_audit_process_owns_no_events_partition(tmp_path: Path) -> None:
    guard, audit, both, baseline = (
        finished_worker(tmp_path / f"{i}.log", role)
        for i, role in enumerate(["guard", "audit", "all", None])
    )
    assert [process_role(p) for p in (guard, audit, both, baseline)] == [
        "guard",
        "audit",
        "all",
        "all",
    ]
    assert event_consumers([guard, audit]) == [guard]
    assert event_consumers([both, baseline]) == [both, baseline]


def test_ready_and_assignments_count_this_runs_lines_only(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    worker = finished_worker(log, "guard")
    assert worker.process is not None
    pid, earlier = worker.process.pid, worker.process.pid + 100_000
    assert not worker_ready(worker)  # no log yet
    log.write_text(
        f"[2026-12-06 12:29:51,442] [{earlier}] [INFO] events partitions assigned to this "
        "worker: [0, 1, 2, 3]\n"
        f"[2026-12-06 12:29:51,462] [{earlier}] [INFO] [^DeadlineWorker]: Ready\n"
        f"[2026-12-06 12:30:04,269] [{pid}] [INFO] events partitions assigned to this "
        "worker: [0, 1]\n"
    )
    assert assignments(worker) == 1
    assert not worker_ready(worker)  # the Ready is the earlier run's
    with log.open("a") as out:
        out.write(f"[2026-12-06 12:30:04,357] [{pid}] [INFO] [^DeadlineWorker]: Ready\n")
        out.write(
            f"[2026-12-06 12:30:09,000] [{pid}] [INFO] events partitions assigned to this "
            "worker: [0, 1, 2, 3]\n"
        )
    assert worker_ready(worker)
    assert assignments(worker) == 2
