"""Run state figures, old codec (JSON of ``RunState.to_dict``) against the new binary form
(``streams.state.state_format``), in one run and without a broker:

* bytes per encoded state at historySize 30: a run of 30 different calls with different
  results (the common case) and a run looping on one call (recent decisions kept);
* changelog bytes per event for the load generator's event mix (bench/lab/run_plans.py: mostly
  ordinary runs, some generic-repeat, ping-pong and compaction loops, ``--runs`` runs in
  flight round robin), Avro-encoded and decoded as the worker does, through the worker's
  ``EventProcessor`` in batches of ``--batch`` messages; every run a batch touched is one
  changelog write (what ``guard_runs`` does), sized with both codecs;
* encode and decode time per written state for both, and the processor's per-run-per-batch
  rollback snapshot (``to_dict``), best of ``--repeat`` passes over the same states;
* memory per active run: ``--mem-runs`` runs of 30 different calls each (historySize 30)
  held by the processor's table, measured with tracemalloc after the hash memos are emptied
  (they are bounded and shared, not per run; their size is printed apart), then again after
  those runs were dropped (expired) and as many new ones were taken in: flat in the number of
  runs seen means the second wave costs what the first did and dropped runs leave nothing;
  and a third wave whose results differ from run to run too (load_gen's results repeat
  across runs, so the shared hash memo hands every run the same result-hash strings).

    python bench/state_bench.py [--runs 10000] [--events 300000] [--batch 500]
                                [--mem-runs 10000] [--repeat 5] [--seed 7] [--json]
    python bench/state_bench.py --mem-lines 12 [--mem-runs 1000]   # where a run's bytes go
"""

from __future__ import annotations

import argparse
import gc
import json
import linecache
import random
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.lab.harness import CONFIG
from bench.lab.run_plans import RunBuilder, make_plan
from streams.core.engine import core_build
from streams.core.events import RunStarted, ToolResult
from streams.core.fleet import fleet_from_document
from streams.core.hashing import clear_memos
from streams.core.run_state import RunState
from streams.service.processor import EventProcessor
from streams.state import state_format
from streams.wire.avro import decode_event, encode_event
from streams.wire.schema_registry import default_registry

HISTORY_SIZE = 30  # the default, and the figure


def old_encode(state: RunState) -> bytes:
    """What the previous codec wrote: JSON of to_dict (orjson, standard library fallback)."""
    return state_format.encode_json(state.to_dict())


def new_encode(state: RunState) -> bytes:
    return state_format.encode(state)


def decode(payload: bytes) -> RunState:
    """Both forms: the new decoder still reads JSON exactly as the previous codec did."""
    return state_format.decode(payload)


def varied_run(run_id: str, rng: random.Random, calls: int = HISTORY_SIZE) -> list[Any]:
    run = RunBuilder(run_id, "agent-0", "gw-0", 1_700_000_000_000)
    run.add(RunStarted)
    run.varied(rng, calls)  # every call and result different: a full window of 30 records
    return run.events


def unique_results(events: list[Any]) -> list[Any]:
    """The same run with outputs and errors no other run has, as real runs' outputs are."""
    return [
        replace(
            e,
            result_json=e.result_json and e.result_json.replace('"out ', f'"{e.envelope.run_id} '),
            error=e.error and f"{e.error} in {e.envelope.run_id}",
        )
        if isinstance(e, ToolResult)
        else e
        for e in events
    ]


def looping_run(run_id: str) -> list[Any]:
    run = RunBuilder(run_id, "agent-0", "gw-0", 1_700_000_000_000)
    run.add(RunStarted)
    for _ in range(HISTORY_SIZE):
        run.cycle("grep", {"pattern": "TODO", "path": "."}, {"matches": []})
    return run.events


def processor(table: dict[bytes, RunState]) -> EventProcessor:
    fleet = fleet_from_document(CONFIG)
    return EventProcessor(table.get, fleet.for_agent)


def one_state(events: list[Any]) -> RunState:
    table: dict[bytes, RunState] = {}
    proc = processor(table)
    for event in events:
        proc.apply(event.envelope.run_id.encode(), event)
    (touched,) = proc.take_touched()
    return touched.state


def state_sizes(rng: random.Random) -> dict[str, Any]:
    """Bytes of one state at historySize 30, both codecs."""
    out = {}
    for name, events in (
        ("varied", varied_run("size-varied-0001", rng)),
        ("looping", looping_run("size-looping-0001")),
    ):
        state = one_state(events)
        old, new = old_encode(state), new_encode(state)
        assert decode(new).to_dict() == decode(old).to_dict() == state.to_dict()
        out[name] = {
            "records": len(state.history),
            "recent_decisions": len(state.recent),
            "old_bytes": len(old),
            "new_bytes": len(new),
        }
    return out


def best_of(repeat: int, fn: Any, items: list[Any]) -> float:
    """Best seconds per item over ``repeat`` passes (other load on the machine only adds)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for item in items:
            fn(item)
        best = min(best, time.perf_counter() - started)
    return best / max(1, len(items))


def changelog(args: argparse.Namespace) -> dict[str, Any]:
    """Changelog writes and bytes per event for the load generator's mix, both codecs."""
    plan_args = SimpleNamespace(
        seed=args.seed, events=args.events, runs=args.runs, concurrency=args.runs
    )
    plan = make_plan(plan_args, 0, 0)
    registry = default_registry()
    table: dict[bytes, RunState] = {}
    proc = processor(table)
    events = writes = old_bytes = new_bytes = 0
    sample: list[RunState] = []
    sample_every = max(1, len(plan.values) // 2_000)
    for start in range(0, len(plan.values), args.batch):
        for key, value in zip(
            plan.keys[start : start + args.batch],
            plan.values[start : start + args.batch],
            strict=True,
        ):
            proc.apply(key, decode_event(value, registry))
            events += 1
        for run in proc.take_touched():
            table[run.key] = run.state
            writes += 1
            old_bytes += len(old_encode(run.state))
            new_bytes += len(new_encode(run.state))
            if writes % sample_every == 0:
                sample.append(decode(new_encode(run.state)))  # a copy, as it was then
    old_payloads = [old_encode(state) for state in sample]
    new_payloads = [new_encode(state) for state in sample]
    assert [decode(p).to_dict() for p in new_payloads] == [s.to_dict() for s in sample]
    timing = {
        "old_encode_us": best_of(args.repeat, old_encode, sample) * 1e6,
        "new_encode_us": best_of(args.repeat, new_encode, sample) * 1e6,
        "old_decode_us": best_of(args.repeat, decode, old_payloads) * 1e6,
        "new_decode_us": best_of(args.repeat, decode, new_payloads) * 1e6,
        "snapshot_to_dict_us": best_of(args.repeat, RunState.to_dict, sample) * 1e6,
        "states_timed": len(sample),
    }
    return {
        "events": events,
        "runs": args.runs,
        "batch": args.batch,
        "writes": writes,
        "writes_per_event": writes / events,
        "old_bytes_per_event": old_bytes / events,
        "new_bytes_per_event": new_bytes / events,
        "old_bytes_per_write": old_bytes / writes,
        "new_bytes_per_write": new_bytes / writes,
        **timing,
    }


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def memory(args: argparse.Namespace) -> dict[str, Any]:
    """Bytes per active run held by the worker's table (tracemalloc), two waves."""
    rng = random.Random(args.seed)
    registry = default_registry()
    k = args.mem_runs

    def wave(prefix: str, unique: bool = False) -> list[list[bytes]]:
        runs = [varied_run(f"{prefix}-{i:06d}-{rng.getrandbits(32):08x}", rng) for i in range(k)]
        return [[encode_event(e) for e in (unique_results(r) if unique else r)] for r in runs]

    waves = [wave("mem-a"), wave("mem-b"), wave("mem-c", unique=True)]
    table: dict[bytes, RunState] = {}
    proc = processor(table)

    def take_in(messages: list[list[bytes]]) -> None:
        for run in messages:
            for value in run:  # one run at a time: memory, not interleaving, is measured
                event = decode_event(value, registry)  # fresh strings, as the worker has
                proc.apply(event.envelope.run_id.encode(), event)
            for touched in proc.take_touched():
                table[touched.key] = touched.state

    clear_memos()
    tracemalloc.start()
    base = traced()
    take_in(waves[0])
    with_memos = traced() - base
    clear_memos()
    first = traced() - base
    table.clear()  # the runs expire
    residue = traced() - base
    take_in(waves[1])
    clear_memos()
    second = traced() - base
    table.clear()
    cleared = traced() - base
    take_in(waves[2])
    clear_memos()
    third = traced() - base
    tracemalloc.stop()
    assert len(table) == k and all(len(s.history) == HISTORY_SIZE for s in table.values())
    return {
        "runs": k,
        "history_size": HISTORY_SIZE,
        "bytes_per_run": first / k,
        "memo_bytes_per_run": (with_memos - first) / k,
        "residue_after_expiry_per_seen_run": residue / k,
        "bytes_per_run_second_wave": (second - residue) / k,
        "bytes_per_run_unique_results": (third - cleared) / k,
    }


def memory_by_line(args: argparse.Namespace) -> None:
    """Where a run's bytes go: tracemalloc by allocating line over ``--mem-runs`` runs of 30
    calls whose results differ from run to run (the third wave), the top ``--mem-lines``."""
    rng = random.Random(args.seed)
    registry = default_registry()
    k = args.mem_runs
    runs = [
        [encode_event(e) for e in unique_results(varied_run(f"lines-{i:06d}", rng))]
        for i in range(k)
    ]
    table: dict[bytes, RunState] = {}
    proc = processor(table)
    clear_memos()
    gc.collect()
    tracemalloc.start(1)
    before = tracemalloc.take_snapshot()
    for run in runs:
        for value in run:
            event = decode_event(value, registry)
            proc.apply(event.envelope.run_id.encode(), event)
        for touched in proc.take_touched():
            table[touched.key] = touched.state
    clear_memos()
    gc.collect()
    stats = tracemalloc.take_snapshot().compare_to(before, "lineno")
    tracemalloc.stop()
    total = sum(stat.size_diff for stat in stats)
    print(
        f"memory per active run by allocating line ({core_build()} core, {k:,} runs): "
        f"{total / k:,.0f} B in all"
    )
    for stat in stats[: args.mem_lines]:
        frame = stat.traceback[0]
        where = f"{Path(frame.filename).name}:{frame.lineno}"
        line = linecache.getline(frame.filename, frame.lineno).strip()
        print(f"  {stat.size_diff / k:7,.0f} B {stat.count_diff / k:5.1f} objects  {where}  {line}")


def report(result: dict[str, Any]) -> None:
    sizes, log, mem = result["state_sizes"], result["changelog"], result["memory"]
    print(f"run state codec: old JSON vs new binary ({result['core']} core)")
    for name, size in sizes.items():
        print(
            f"  one state, {name} ({size['records']} records, {size['recent_decisions']} recent "
            f"decisions): old {size['old_bytes']:,} B, new {size['new_bytes']:,} B "
            f"({size['old_bytes'] / size['new_bytes']:.1f}x smaller)"
        )
    print(
        f"  changelog, load_gen mix: {log['events']:,} events, {log['runs']:,} runs in flight, "
        f"batches of {log['batch']}: {log['writes']:,} writes ({log['writes_per_event']:.2f} "
        f"per event)"
    )
    print(
        f"    bytes per event: old {log['old_bytes_per_event']:,.0f}, new "
        f"{log['new_bytes_per_event']:,.0f} (per write: old {log['old_bytes_per_write']:,.0f}, "
        f"new {log['new_bytes_per_write']:,.0f})"
    )
    print(
        f"    per state, best of passes over {log['states_timed']:,} written states: encode "
        f"old {log['old_encode_us']:.1f} us, new {log['new_encode_us']:.1f} us; decode old "
        f"{log['old_decode_us']:.1f} us, new {log['new_decode_us']:.1f} us; rollback "
        f"snapshot (to_dict) {log['snapshot_to_dict_us']:.1f} us"
    )
    print(
        f"  memory per active run (tracemalloc, {mem['runs']:,} runs at historySize "
        f"{mem['history_size']}): {mem['bytes_per_run']:,.0f} B; hash memos "
        f"{mem['memo_bytes_per_run']:,.0f} B per run on top (bounded, shared); after those runs "
        f"expired {mem['residue_after_expiry_per_seen_run']:,.0f} B per run seen; a second "
        f"wave {mem['bytes_per_run_second_wave']:,.0f} B per run; with results unlike "
        f"other runs' {mem['bytes_per_run_unique_results']:,.0f} B per run"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Run state size, changelog bytes per event, codec time and memory per "
        "run: old JSON codec against the binary form, in one run, no broker."
    )
    parser.add_argument("--runs", type=int, default=10_000, help="runs in flight (changelog)")
    parser.add_argument("--events", type=int, default=300_000, help="events (changelog)")
    parser.add_argument("--batch", type=int, default=500, help="messages per batch (worker: 500)")
    parser.add_argument("--mem-runs", type=int, default=10_000, help="runs for tracemalloc")
    parser.add_argument("--repeat", type=int, default=5, help="timing passes (best is kept)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--mem-lines", type=int, default=0, help="only print the top N allocating lines per run"
    )
    args = parser.parse_args()
    if args.mem_lines:
        memory_by_line(args)
        return 0
    rng = random.Random(args.seed)
    result = {
        "core": core_build(),
        "state_sizes": state_sizes(rng),
        "changelog": changelog(args),
        "memory": memory(args),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)
    return 0
