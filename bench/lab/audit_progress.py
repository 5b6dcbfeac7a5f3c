"""The audit role's run-progress writes: CPU per watermark for audit batches in which each run
appears once, or several times (a busy run announced by several guarding batches).

The audit agent hands each batch of the control topic's watermarks to
:meth:`streams.audit.store.AuditStore.record_progress` (an upsert per run, SQLite here). This
bench builds batches of ``--batch`` watermarks where every run appears ``k`` times (``--repeats``,
one pass per value) and prints the CPU (``time.process_time``) per watermark of writing them,
the watermarks' construction left out: a run's repeats cost less than new runs where the store
merges them first (streams/audit/progress_rows.py).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from streams.audit.store import AuditStore
from streams.wire.avro import RunWatermark


def batches_of(batch: int, repeats: int, count: int) -> list[list[RunWatermark]]:
    """``count`` batches of ``batch`` watermarks, each run ``repeats`` times at rising seqs;
    the runs come back every 20 batches, so most writes update a stored row."""
    runs = max(1, batch // repeats)
    out, seq = [], 0
    for number in range(count):
        marks = []
        for _ in range(repeats):
            seq += 1
            marks += [
                RunWatermark(
                    run_id=f"run-{number % 20}-{run}",
                    agent_id="agent",
                    gateway_id="gw",
                    seq=seq,
                    event_time=seq,
                    status="active",
                    event_count=seq,
                )
                for run in range(runs)
            ]
        out.append(marks)
    return out


def one_pass(batches: list[list[RunWatermark]]) -> float:
    """CPU seconds to record ``batches`` into a fresh, migrated SQLite audit trail."""
    with tempfile.TemporaryDirectory() as folder:
        store = AuditStore(f"sqlite:///{folder}/audit.db")
        store.migrate()
        try:
            started = time.process_time()
            for marks in batches:
                store.record_progress(marks)
            return time.process_time() - started
        finally:
            store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=500, help="watermarks per batch (500)")
    parser.add_argument("--batches", type=int, default=200, help="batches per pass (200)")
    parser.add_argument(
        "--repeats", default="1,5,20", help="times each run appears in a batch, one pass each"
    )
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    figures: dict[int, float] = {}
    for repeats in [int(value) for value in args.repeats.split(",")]:
        batches = batches_of(args.batch, repeats, args.batches)
        written = sum(len(marks) for marks in batches)
        figures[repeats] = one_pass(batches) / written * 1e6
        print(
            f"  each run {repeats}x per batch: {figures[repeats]:.1f} us CPU per watermark "
            f"({written:,} watermarks, batches of {args.batch})",
            flush=True,
        )
    first = next(iter(figures.values()))
    for repeats, cost in figures.items():
        print(f"  ratio to the first: {repeats}x {cost / first:.2f}")
    end = os.getloadavg()
    print(f"load average at the end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
    if args.json:
        print(json.dumps({"us_per_watermark": figures, "load_start": load, "load_end": end}))
    return 0
