"""What choosing evictions costs a worker in memory when a flood fills its runs table
(issue 40 item 3), measured with tracemalloc, no broker, no timings; and whose runs went.

The table: ``--runs`` runs spread over ``--gateways`` gateways, one victim gateway holding a
single looping run not yet warned (idle, the least recently active of all), then ``--flood``
fresh run ids from one more gateway; the cap is ``--runs``, as the report's 3,000 against a
flood of 3,500.
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
from collections import Counter

from streams.state.eviction import choose_evictions


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Peak memory of one eviction choice over a flooded runs table, and whose "
        "runs it evicts (issue 40); tracemalloc, no broker, no timings."
    )
    parser.add_argument("--runs", type=int, default=200_000, help="runs held, and the cap")
    parser.add_argument("--gateways", type=int, default=50, help="gateways holding them")
    parser.add_argument("--flood", type=int, default=3_500, help="fresh run ids of the flood")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    classes: dict[bytes, str] = {b"victim-loop": "idle"}
    owners: dict[bytes, str] = {b"victim-loop": "gw-victim"}
    touched: dict[bytes, float] = {b"victim-loop": 0.0}
    for i in range(args.runs):
        run_id = f"run-{i:07d}".encode()
        classes[run_id], owners[run_id] = "idle", f"gw-{i % args.gateways}"
        touched[run_id] = 1.0 + i
    for i in range(args.flood):
        run_id = f"flood-{i:07d}".encode()
        classes[run_id], owners[run_id] = "idle", "gw-flood"
        touched[run_id] = 1.0 + args.runs + i
    tracemalloc.start()
    try:
        chosen = choose_evictions(classes, owners, touched, cap=args.runs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    result = {
        "table": len(classes),
        "cap": args.runs,
        "evicted": len(chosen),
        "evicted_by_gateway": dict(Counter(owners[run_id] for run_id, _ in chosen).most_common(3)),
        "victim_kept": b"victim-loop" not in dict(chosen),
        "peak_mib": round(peak / 2**20, 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['table']:,} runs, cap {result['cap']:,}: evicted {result['evicted']:,} "
            f"(most from {result['evicted_by_gateway']}), the victim's loop kept: "
            f"{result['victim_kept']}; peak {result['peak_mib']} MiB while choosing"
        )
    return 0
