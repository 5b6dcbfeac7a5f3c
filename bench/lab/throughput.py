"""loopguard's throughput against its baselines, measured side by side in one run.

On one broker (``--broker tansu|kafka``), the same pre-encoded events (``--runs`` runs
interleaved round robin, ``--events`` in all, built by ``bench/lab/run_plans.py``) and
the same partitions go through, one after the other:

1. a bare aiokafka consume → produce loop (``bench/forwarders.py aiokafka``);
2. a bare Faust agent that only forwards (``bench/forwarders.py faust``);
3. one loopguard worker (``loopguardx1``);
4. two loopguard workers, one consumer group (``loopguardx2``; ``--only`` takes any
   ``loopguardx<N>``, e.g. ``aiokafka,loopguardx1,loopguardx4``; N needs N partitions).

Each contender gets its own topics (``tb-<name>.*``) and consumer group. The events are
produced first, then the contender is started on that backlog, so producing never shares the
2 cores with consuming. The clock runs from the first commit seen after every process has its
final partitions (start-up, joins and rebalances stay outside) until every partition is
committed to its end: events committed in between / time. Both ends fall on a commit, so
all are timed the same way; every contender commits every 0.5 s but the bare aiokafka loop,
which drains the backlog in about a second and commits every 0.1 s, so its window is not a
handful of commit intervals (at 0.5 s its figure swung 52,000-140,000 events/s).

Beside each figure: its share of the bare aiokafka loop's events/s in the same run; the CPU
(user + system) its processes used per event in the timed window, from /proc, for all of them
and for each worker (its CPU / the events of the partitions it owned); the load average at its
start and end. That CPU predicts how workers scale where each has a core of its own: where the
machine has fewer cores than N workers, N x 1e6 / (CPU us per event) is printed as a
prediction beside N workers / one measured.

Then, with the two workers: decision latency at ``--rate`` events/s offered (10,000 new runs
interleaved plus a compaction loop every ``--probe-every`` events whose abort is timed from its
last event produced to the decision received); changelog bytes written per event (every record
of the one-worker run's changelog topic, key + value, / events); memory per active run (the
one worker's RSS peak during the drain minus the RSS of the same worker idle, / runs; and
tracemalloc in-process).

    python bench/throughput_bench.py [--broker tansu|kafka] [--events 100000] [--runs 10000]
                                     [--partitions 4] [--only aiokafka,loopguardx1,loopguardx4]
                                     [--rate 2000] [--latency-seconds 30]
                                     [--roles all|split] [--json]

``--roles split`` runs each loopguard contender's N workers as ``LOOPGUARD_ROLE=guard`` plus
one ``LOOPGUARD_ROLE=audit`` process (same app id, topics, database and config; docs/
operations.md "Worker roles"): its CPU counts in all the processes', its line names the role.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from kafka import KafkaProducer

from bench.lab.brokers import add_broker_arg, start_broker
from bench.lab.harness import (
    CONFIG,
    ROLES,
    GroupProgress,
    RssSampler,
    bench_settings,
    broker_pids,
    event_consumers,
    load_average,
    process_role,
    rss_kb,
    scan_topic,
    settled,
    start_forwarder,
    start_roles,
)
from bench.lab.heard import sentinel_ids
from bench.lab.latency import latency_at_rate, memory_per_run_safe
from bench.lab.run_plans import compaction_loop_run, make_plan
from bench.lab.throughput_drain import Drain, assignments, time_drain
from bench.lab.throughput_report import (
    BASELINES,
    check_contenders,
    contender_workers,
    per_worker,
    print_report,
)
from streams.core.engine import core_build
from streams.devtools.worker_process import WorkerProcess
from streams.kafka.topics import create_like, ensure_topics
from streams.settings import PROFILES
from streams.wire.avro import CodecError, decode_control, encode_event

LATENCY_WORKERS = 2  # the latency phase's workers


def produce(producer: KafkaProducer, topic: str, messages) -> dict[int, int]:
    """Send and flush; returns the end offset per partition, from the brokers' answers
    (tansu's ListOffsets answer is per batch, not per record)."""
    futures = [producer.send(topic, key=key, value=value) for key, value in messages]
    producer.flush()
    ends: dict[int, int] = {}
    for future in futures:
        meta = future.get(timeout=60)
        ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
    return ends


def start_contender(name: str, ctx: dict, prefix: str) -> list[WorkerProcess]:
    args, broker, tmp = ctx["args"], ctx["broker"], ctx["tmp"]
    if name in BASELINES:
        return start_forwarder(name, broker, prefix, args.partitions, tmp)
    env = {"LOOPGUARD_RUN_IDLE_TTL": "3600"}  # every run stays in the table meanwhile
    return start_roles(
        broker, contender_workers(name), tmp, roles=args.roles, db_url=ctx["db_url"],
        config_file=ctx["config_file"],
        partitions=args.partitions, app_id=prefix, prefix=prefix, env=env,
    )  # fmt: skip


def idle_rss(name: str, ctx: dict, prefix: str, progress: GroupProgress) -> list[int]:
    """RSS of the contender started on its (still empty) topic, once it has consumed a probe
    run per partition; then stopped, so the timed start below begins the same way."""
    args, topic = ctx["args"], f"{prefix}.events"
    processes = start_contender(name, ctx, prefix)
    try:
        probes = [
            (e.envelope.run_id.encode(), encode_event(e))
            for run_id in sentinel_ids(f"{prefix}-probe", args.partitions)
            for e in compaction_loop_run(run_id)
        ]
        ends = produce(ctx["producer"], topic, probes)
        progress.wait_for(ends, 180, lambda: all(p.alive for p in processes))
        return [rss_kb(p.process.pid) or 0 for p in processes if p.process]
    finally:
        for process in processes:
            process.stop()


def run_contender(name: str, ctx: dict, plan) -> dict:
    """Produce the load, start ``name`` on it, time from its first commit after a stable
    assignment to every partition committed to its end."""
    args, broker = ctx["args"], ctx["broker"]
    prefix = f"tb-{name}"
    settings = bench_settings(broker, args.partitions, prefix, prefix)
    ensure_topics(settings)
    if name in BASELINES:
        create_like(settings, f"{prefix}.forward", settings.topics.events)
    progress = GroupProgress(broker.bootstrap, prefix, settings.topics.events, args.partitions)
    figures: dict = {"name": name, "cpu_count": os.cpu_count(), "load_start": load_average()}
    processes: list[WorkerProcess] = []
    try:
        if name == "loopguardx1":
            figures["rss_idle_kb"] = idle_rss(name, ctx, prefix, progress)
        loaded = time.monotonic()
        ends = produce(
            ctx["producer"], settings.topics.events, zip(plan.keys, plan.values, strict=True)
        )
        before = sum(progress.committed().values())
        total = sum(ends.values())
        print(
            f"  {name}: {len(plan.values):,} events produced in "
            f"{time.monotonic() - loaded:.1f}s; starting",
            flush=True,
        )
        started = time.monotonic()
        processes = start_contender(name, ctx, prefix)
        pids = [p.process.pid for p in processes if p.process]
        sampler = RssSampler(pids)
        sampler.start()
        drain = time_drain(name, args, processes, progress, ends, broker_pids(broker))
        sampler.stop()
        roles = [process_role(p) for p in processes]
        figures.update(drain_figures(drain, before, started, roles))
        figures.update(
            processes=len(processes),
            events=len(plan.values),
            drained=drain.last.count >= total,
            rss_peak_kb=sampler.peak_between(0, float("inf")),
            rss_end_kb=[rss_kb(pid) or 0 for pid in pids],
            roles=roles,
            rebalances=sum(assignments(p) for p in event_consumers(processes)),
        )
        print(
            f"  {name}: {figures['events_per_s']:,} events/s ({figures['timed_events']:,} "
            f"events in {figures['seconds']:.1f}s"
            f"{'' if figures['drained'] else ', drain timeout: not all processed'}; "
            f"{figures['cpu_us_per_event'] or 'n/a'} us CPU per event, all its processes; "
            f"load average {figures['load_start']} -> {load_average()})",
            flush=True,
        )
        for process in processes:
            process.stop()  # graceful: commits what it processed
        if name not in BASELINES and figures["drained"]:
            figures.update(decision_check(broker.bootstrap, settings, plan))
        if name == "loopguardx1":
            processed = sum(progress.committed().values()) - before
            figures.update(changelog_size(broker.bootstrap, prefix, args.partitions, processed))
    finally:
        progress.close()
        for process in processes:
            process.stop()
        figures["load_end"] = load_average()
    return figures


def drain_figures(drain: Drain, before: int, started: float, roles: list[str]) -> dict:
    """Events/s and CPU per event, all processes (an audit process's too) and each, over the
    timed window; from the process start where one commit held every event (then without
    CPU). Work left after the window (the audit of its last decisions) is not counted, in
    either role layout."""
    with_start = drain.first is None or drain.last.count <= drain.first.count
    if with_start:
        counted, elapsed = drain.last.count - before, drain.last.at - started
    else:
        counted, elapsed = drain.last.count - drain.first.count, drain.last.at - drain.first.at
    cpu = sum(drain.cpu_by_process())
    broker_cpu = drain.broker_cpu()
    workers = None
    if not with_start and not drain.reassigned():
        owned = drain.last.owned
        workers = per_worker(
            owned, drain.events_by_partition(), drain.cpu_by_process(), elapsed, roles
        )
    return {
        "timed_with_start_up": with_start,
        "timed_events": counted,
        "seconds": round(elapsed, 2),
        "events_per_s": round(counted / elapsed) if elapsed > 0 else 0,
        "cpu_s": None if with_start else round(cpu, 3),
        "cpu_us_per_event": round(cpu / counted * 1e6, 1)
        if counted > 0 and not with_start
        else None,
        "per_worker": workers,
        "broker_cpu_us_per_event": round(broker_cpu / counted * 1e6, 1)
        if counted > 0 and not with_start
        else None,
        # the contender's and the broker's CPU over the window, as a share of all the cores
        "machine_busy": round((cpu + broker_cpu) / (elapsed * (os.cpu_count() or 1)), 3)
        if elapsed > 0 and not with_start
        else None,
    }


def latency_phase(ctx: dict) -> dict:
    """Two fresh workers on their own topics, proven consuming, then the offered load."""
    args, broker = ctx["args"], ctx["broker"]
    prefix = "tb-latency"
    settings = bench_settings(broker, args.partitions, prefix, prefix)
    ensure_topics(settings)
    progress = GroupProgress(broker.bootstrap, prefix, settings.topics.events, args.partitions)
    processes = start_contender(f"loopguardx{LATENCY_WORKERS}", ctx, prefix)
    try:
        deadline = time.monotonic() + 180
        while not settled(processes, args.partitions):
            if time.monotonic() > deadline or not all(p.alive for p in processes):
                raise RuntimeError(f"latency workers not assigned; see {processes[0].log_path}")
            time.sleep(0.2)
        probes = [
            (e.envelope.run_id.encode(), encode_event(e))
            for run_id in sentinel_ids(f"{prefix}-probe", args.partitions)
            for e in compaction_loop_run(run_id)
        ]
        ends = produce(ctx["producer"], settings.topics.events, probes)
        progress.wait_for(ends, 180, lambda: all(p.alive for p in processes))
        return latency_at_rate(args, broker, settings, ctx["producer"], processes)
    finally:
        progress.close()
        for process in processes:
            process.stop()


def decision_check(bootstrap: str, settings, plan) -> dict:
    """Decisions on the control topic against what the pure core decides on the events."""
    seen: set[tuple[str, int]] = set()
    runs = set(plan.run_ids)
    for record in scan_topic(bootstrap, settings.topics.control, settings.partitions):
        try:
            message = decode_control(record.value)
        except CodecError:
            continue
        if hasattr(message, "action") and message.run_id in runs:
            seen.add((message.run_id, message.seq))
    expected = set(plan.triggers)
    return {
        "decisions_expected": len(expected),
        "decisions_missing": len(expected - seen),
        "decisions_unexpected": len(seen - expected),
    }


def changelog_size(bootstrap: str, app_id: str, partitions: int, events: int) -> dict:
    """Records and bytes (key + value) the table wrote to its changelog, per event processed
    (committed by the stopped worker)."""
    records = size = 0
    for record in scan_topic(bootstrap, f"{app_id}-runs-changelog", partitions):
        records += 1
        size += len(record.key or b"") + len(record.value or b"")
    events = max(events, 1)
    return {
        "changelog_records_per_event": round(records / events, 3),
        "changelog_bytes_per_event": round(size / events, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_broker_arg(parser)
    parser.add_argument(
        "--events", type=int, default=100_000, help="events (at least what --runs need; 100000)"
    )
    parser.add_argument("--runs", type=int, default=10_000, help="runs interleaved (10000)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions (default 4)")
    parser.add_argument("--rate", type=int, default=2000, help="offered events/s (2000)")
    parser.add_argument(
        "--latency-seconds", type=float, default=30.0, help="latency phase (30; 0 = skip)"
    )
    parser.add_argument(
        "--probe-every", type=int, default=100, help="a timed run every N events (100)"
    )
    parser.add_argument(
        "--only",
        default="aiokafka,faust,loopguardx1,loopguardx2",
        help="comma list of contenders: aiokafka, faust, loopguardx<N> for N workers (N needs "
        "at least N partitions); default aiokafka,faust,loopguardx1,loopguardx2",
    )
    parser.add_argument("--drain-timeout", type=float, default=600.0, help="max s per drain (600)")
    parser.add_argument(
        "--run-mem", type=int, default=10_000, help="tracemalloc runs (10000; 0 = skip)"
    )
    parser.add_argument("--progress", type=float, default=10.0, help="progress line every N s (10)")
    parser.add_argument("--seed", type=int, default=1, help="workload seed (1)")
    parser.add_argument(
        "--roles",
        choices=ROLES,
        default="all",
        help="all: each loopguard worker runs every role (default); split: its N workers run "
        "LOOPGUARD_ROLE=guard plus one LOOPGUARD_ROLE=audit process, whose CPU counts in "
        "the contender's",
    )
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    args = parser.parse_args()
    # A stopped bench stops its broker and processes (the finally clauses run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    latency_workers = LATENCY_WORKERS if args.latency_seconds > 0 else 0
    error = check_contenders(names, args.partitions, latency_workers)
    if error:
        print(f"throughput_bench: {error}", file=sys.stderr)
        return 2
    args.load_at_start = load_average()
    print(
        f"{os.cpu_count()} cores, load average (1/5/15 min) {args.load_at_start}; "
        f"build: {core_build()}",
        flush=True,
    )

    tmp = Path(tempfile.mkdtemp(prefix="loopguard-throughput-"))
    config_file = tmp / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    plan_args = argparse.Namespace(
        runs=args.runs, events=args.events, seed=args.seed, concurrency=args.runs
    )
    plan = make_plan(plan_args, 0, 0)
    print(
        f"{len(plan.values):,} events in {args.runs:,} runs interleaved, "
        f"{len(plan.triggers):,} decisions expected; logs in {tmp}",
        flush=True,
    )
    broker = start_broker(args.broker, tmp)
    print(f"broker {args.broker} up: {broker.bootstrap}", flush=True)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, linger_ms=5, acks=1, batch_size=256 * 1024
    )
    ctx = {
        "args": args,
        "broker": broker,
        "tmp": tmp,
        "producer": producer,
        "db_url": f"sqlite:///{tmp / 'audit.db'}",
        "config_file": config_file,
    }
    results: dict[str, dict] = {}
    latency: dict | None = None
    try:
        for name in names:
            print(f"{name}: {os.cpu_count()} cores, load average {load_average()}", flush=True)
            results[name] = run_contender(name, ctx, plan)
        if args.latency_seconds > 0:
            latency = latency_phase(ctx)
    finally:
        producer.close()
        broker_rss = [rss_kb(pid) for pid in broker_pids(broker)]
        broker.stop()
    memory = memory_per_run_safe(args.run_mem, args.seed) if args.run_mem else None
    guarantee = (
        os.environ.get("LOOPGUARD_PROCESSING_GUARANTEE")
        or PROFILES[args.broker].processing_guarantee
    )
    print_report(args, guarantee, results, latency, memory, broker_rss)
    return 0
