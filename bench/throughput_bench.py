"""loopguard's throughput against its baselines, measured side by side in one run.

On one broker (``--broker tansu|kafka``), the same pre-encoded events (``--runs`` runs
interleaved round robin, ``--events`` in all, built by ``bench/load_gen.py``'s workload) and
the same partitions go through, one after the other:

1. a bare aiokafka consume → produce loop (``bench/forwarders.py aiokafka``);
2. a bare Faust agent that only forwards (``bench/forwarders.py faust``);
3. one loopguard worker;
4. two loopguard workers (one consumer group).

Each contender gets its own topics (``tb-<name>.*``) and consumer group. The events are
produced first, then the contender is started on that backlog, so producing never shares the
2 cores with consuming. The clock runs from the first commit seen after every process has its
final partitions (start-up, joins and rebalances stay outside) until every partition is
committed to its end: events committed in between / time. Every contender commits every
0.5 s and both ends fall on a commit, so all are timed the same way.

Beside each figure: the CPU (user + system) its processes used per event in the timed window,
from /proc: what predicts how workers scale where each has a core of its own (on 2 cores four
workers cannot be measured; 1e6 / that figure is the events/s one busy core sustains).

Then, with the two workers: decision latency at ``--rate`` events/s offered (10,000 new runs
interleaved plus a compaction loop every ``--probe-every`` events whose abort is timed from its
last event produced to the decision received); changelog bytes written per event (every record
of the one-worker run's changelog topic, key + value, / events); memory per active run (the
one worker's RSS peak during the drain minus the RSS of the same worker idle, / runs; and
tracemalloc in-process).

    python bench/throughput_bench.py [--broker tansu|kafka] [--events 100000] [--runs 10000]
                                     [--rate 2000] [--latency-seconds 30] [--json]
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

# Appended, not prepended: an installed build (the compiled core, setup.py) comes first.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from brokers import add_broker_arg, start_broker  # noqa: E402  (this directory)
from harness import (  # noqa: E402
    CONFIG,
    GROUP_ENV,
    GroupProgress,
    RssSampler,
    assignment_complete,
    bench_settings,
    broker_pids,
    mb,
    rss_kb,
    scan_topic,
    start_workers,
)
from kafka import KafkaProducer  # noqa: E402
from latency import latency_at_rate, memory_per_run_safe  # noqa: E402
from load_gen import compaction_loop_run, make_plan, sentinel_ids  # noqa: E402

from streams.devtools.worker_process import WorkerProcess  # noqa: E402
from streams.kafka.topics import create_like, ensure_topics  # noqa: E402
from streams.settings import PROFILES  # noqa: E402
from streams.wire.avro import CodecError, decode_control, encode_event  # noqa: E402

FORWARDERS = Path(__file__).resolve().parent / "forwarders.py"


class ForwarderProcess(WorkerProcess):
    """A baseline forwarder run like a worker (same start/stop, same LOOPGUARD_* settings)."""

    kind = "aiokafka"

    def command(self) -> list[str]:
        return [sys.executable, str(FORWARDERS), self.kind]


def start_forwarder(kind: str, broker, prefix: str, partitions: int, tmp: Path):
    env = {
        **GROUP_ENV,
        "LOOPGUARD_BROKER": broker.url,
        "LOOPGUARD_BROKER_PROFILE": broker.profile,
        "LOOPGUARD_APP_ID": prefix,
        "LOOPGUARD_TOPIC_PREFIX": prefix,
        "LOOPGUARD_PARTITIONS": str(partitions),
        "LOOPGUARD_DATA_DIR": str(tmp / f"{prefix}-data"),
        # Plain batching (Kafka's 16 KB default) for both baselines on every broker, as
        # both of loopguard's broker profiles now batch (16 KB).
        "LOOPGUARD_PRODUCER_MAX_BATCH": "16384",
        # Plain consume -> produce, as the aiokafka loop does; the kafka profile's exactly once
        # is loopguard's (a bare Faust app without tables also crashes on it in Faust 0.15.3:
        # KeyError in PartitionAssignor.group_for_topic at the first assignment).
        "LOOPGUARD_PROCESSING_GUARANTEE": "at_least_once",
    }
    process = ForwarderProcess(broker.url, "", log_path=tmp / f"{prefix}.log", env=env)
    process.kind = kind
    return [process.start()]


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
    kind, _, count = name.partition("x")
    if kind in ("aiokafka", "faust"):
        return start_forwarder(kind, broker, prefix, args.partitions, tmp)
    env = {"LOOPGUARD_RUN_IDLE_TTL": "3600"}  # every run stays in the table meanwhile
    return start_workers(
        broker, int(count), tmp, db_url=ctx["db_url"], config_file=ctx["config_file"],
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
    if not name.startswith("loopguard"):
        create_like(settings, f"{prefix}.forward", settings.topics.events)
    progress = GroupProgress(broker.bootstrap, prefix, settings.topics.events, args.partitions)
    figures: dict = {"name": name}
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
        first, done, count = time_drain(name, ctx, processes, progress, ends)
        sampler.stop()
        counted, elapsed = count - first[1], done - first[0]
        with_start = counted <= 0  # all of it in one commit: time it from the start instead
        if with_start:
            counted, elapsed = count - before, done - started
        drained = count >= total
        cpu = ctx.pop("cpu_at_end", 0.0) - ctx.pop("cpu_at_first", 0.0)
        figures.update(
            cpu_us_per_event=round(cpu / counted * 1e6, 1)
            if counted > 0 and not with_start
            else None,
            processes=len(processes),
            events=len(plan.values),
            drained=drained,
            timed_with_start_up=with_start,
            timed_events=counted,
            seconds=round(elapsed, 2),
            events_per_s=round(counted / elapsed) if elapsed > 0 else 0,
            rss_peak_kb=sampler.peak_between(0, float("inf")),
            rss_end_kb=[rss_kb(pid) or 0 for pid in pids],
            rebalances=sum(assignments(p) for p in processes),
        )
        print(
            f"  {name}: {figures['events_per_s']:,} events/s ({counted:,} events in "
            f"{elapsed:.1f}s{'' if drained else ', drain timeout: not all processed'}; "
            f"{figures['cpu_us_per_event']} us CPU per event, all its processes)",
            flush=True,
        )
        for process in processes:
            process.stop()  # graceful: commits what it processed
        if name.startswith("loopguard") and drained:
            figures.update(decision_check(broker.bootstrap, settings, plan))
        if name == "loopguardx1":
            processed = sum(progress.committed().values()) - before
            figures.update(changelog_size(broker.bootstrap, prefix, args.partitions, processed))
    finally:
        progress.close()
        for process in processes:
            process.stop()
    return figures


def latency_phase(ctx: dict) -> dict:
    """Two fresh workers on their own topics, proven consuming, then the offered load."""
    args, broker = ctx["args"], ctx["broker"]
    prefix = "tb-latency"
    settings = bench_settings(broker, args.partitions, prefix, prefix)
    ensure_topics(settings)
    progress = GroupProgress(broker.bootstrap, prefix, settings.topics.events, args.partitions)
    processes = start_contender("loopguardx2", ctx, prefix)
    try:
        deadline = time.monotonic() + 180
        while not assignment_complete(processes, args.partitions):
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


def assignments(process: WorkerProcess) -> int:
    """Partition assignments a worker logged (1 = no rebalance after it joined)."""
    if process.log_path is None or not process.log_path.exists():
        return 0
    text = process.log_path.read_text(errors="replace")
    return text.count("events partitions assigned to this worker")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU the processes used so far (Linux /proc), 0 for one that is gone."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def time_drain(name: str, ctx: dict, processes, progress: GroupProgress, ends: dict):
    """Poll the group's commits every 50 ms. The clock starts at the first commit seen after
    every process has its final partitions (start-up, joins and rebalances stay outside) and
    stops when every partition is committed to its end, or at ``--drain-timeout`` (then the
    figure is the rate until then); returns ((t0, committed at t0), t_end, committed at
    t_end). Both ends fall on a commit, so the commit interval cancels out."""
    args = ctx["args"]
    workers = name.startswith("loopguard")
    total = sum(ends.values())
    deadline = time.monotonic() + args.drain_timeout + 180  # start-up: at most 180 s
    stable = not workers
    last_seen = None
    first = None
    last_report = time.monotonic()
    while True:
        if not all(p.alive for p in processes):
            raise RuntimeError(f"{name}: a process died; see {processes[0].log_path}")
        if not stable:
            stable = assignment_complete(processes, args.partitions)
        committed = {tp.partition: c for tp, c in progress.committed().items()}
        now = time.monotonic()
        count = sum(min(committed.get(p, 0), end) for p, end in ends.items())
        if stable and first is None and last_seen is not None and count > last_seen:
            first = (now, count)
            ctx["cpu_at_first"] = cpu_seconds([p.process.pid for p in processes if p.process])
        last_seen = count
        if first is not None and deadline > first[0] + args.drain_timeout:
            deadline = first[0] + args.drain_timeout  # --drain-timeout counts from t0
        if count >= total or now > deadline:
            ctx["cpu_at_end"] = cpu_seconds([p.process.pid for p in processes if p.process])
            return first or (now, count), now, count
        if now - last_report >= args.progress:
            last_report = now
            print(f"  [{name}] committed {count:,} of {total:,}", flush=True)
        time.sleep(0.05)


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
    parser.add_argument("--only", help="comma list of aiokafka,faust,loopguardx1,loopguardx2")
    parser.add_argument("--drain-timeout", type=float, default=600.0, help="max s per drain (600)")
    parser.add_argument(
        "--run-mem", type=int, default=10_000, help="tracemalloc runs (10000; 0 = skip)"
    )
    parser.add_argument("--progress", type=float, default=10.0, help="progress line every N s (10)")
    parser.add_argument("--seed", type=int, default=1, help="workload seed (1)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    args = parser.parse_args()
    # A stopped bench stops its broker and processes (the finally clauses run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.load_at_start = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    names = (args.only or "aiokafka,faust,loopguardx1,loopguardx2").split(",")

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
            print(f"{name}:", flush=True)
            results[name] = run_contender(name, ctx, plan)
        if args.latency_seconds > 0:
            latency = latency_phase(ctx)
    finally:
        producer.close()
        broker_rss = [rss_kb(pid) for pid in broker_pids(broker)]
        broker.stop()
    memory = memory_per_run_safe(args.run_mem, args.seed) if args.run_mem else None
    report(args, results, latency, memory, broker_rss)
    return 0


def report(args, results: dict, latency: dict | None, memory: dict | None, broker_rss) -> None:
    print()
    print(
        f"throughput side by side: broker {args.broker}, {args.partitions} partitions, "
        f"{args.runs:,} runs interleaved, pre-produced backlog, {os.cpu_count()} cores"
    )
    base = results.get("aiokafka", {}).get("events_per_s")
    guarantee = (
        os.environ.get("LOOPGUARD_PROCESSING_GUARANTEE")
        or PROFILES[args.broker].processing_guarantee
    )
    print(
        "  producer batches: 16 KB for both baselines; loopguard's from its broker profile; "
        f"baselines at least once, loopguard {guarantee.replace('_', ' ')}"
    )
    print(f"  {'contender':<28}{'events/s':>10}{'vs aiokafka':>13}{'seconds':>9}  notes")
    for name, r in results.items():
        ratio = f"{r['events_per_s'] / base:.1%}" if base else "n/a"
        notes = []
        if "decisions_expected" in r:
            notes.append(
                f"decisions: {r['decisions_expected']:,} expected, "
                f"{r['decisions_missing']:,} missing, "
                f"{r['decisions_unexpected']:,} unexpected"
            )
        if r["timed_with_start_up"]:
            notes.append("one commit held every event: timed from the process start")
        if not r["drained"]:
            notes.append(f"rate over {r['timed_events']:,} events (drain timeout)")
        if r.get("cpu_us_per_event"):
            per_worker = r["cpu_us_per_event"]
            notes.append(
                f"{per_worker:,.0f} us CPU/event ({1e6 / per_worker:,.0f} events/s per busy core)"
            )
        if r.get("rebalances", 0) > r.get("processes", 1) and name.startswith("loopguard"):
            notes.append(f"{r['rebalances']} assignments in all (timed after the last)")
        label = {
            "aiokafka": "bare aiokafka loop",
            "faust": "bare Faust forwarding agent",
            "loopguardx1": "loopguard, 1 worker",
            "loopguardx2": "loopguard, 2 workers",
        }[name]
        print(
            f"  {label:<28}{r['events_per_s']:>10,}{ratio:>13}{r['seconds']:>9.1f}  "
            + "; ".join(notes)
        )
    one, two = results.get("loopguardx1"), results.get("loopguardx2")
    if one and two:
        print(
            f"  two workers / one: {two['events_per_s'] / one['events_per_s']:.2f}x "
            f"({two['events_per_s'] / 2:,.0f} events/s per worker with two)"
        )
    if one and "changelog_bytes_per_event" in one:
        print(
            f"  changelog written (1 worker): {one['changelog_bytes_per_event']:,.0f} bytes/"
            f"event, {one['changelog_records_per_event']:.2f} records/event"
        )
    if one:
        grown = one["rss_peak_kb"][0] - one["rss_idle_kb"][0]
        print(
            f"  worker RSS (1 worker): idle {mb(one['rss_idle_kb'][0])}, peak "
            f"{mb(one['rss_peak_kb'][0])}: {grown * 1024 / args.runs:,.0f} bytes per run "
            f"held ({args.runs:,} runs)"
        )
    if memory:
        print(
            f"  memory per active run, tracemalloc ({memory['runs']:,} RunStates, 30-call "
            f"histories): {memory['bytes_per_run']:,.0f} bytes"
        )
    if latency:
        caught = latency["catch_up_s"]
        print(
            f"  decision latency, 2 workers, {latency['offered_per_s']:,.0f} events/s offered "
            f"for {latency['seconds']:.0f}s ({args.runs:,} runs interleaved + timed "
            f"compaction loops): p50 {latency['p50_ms']:,.1f} ms, p99 "
            f"{latency['p99_ms']:,.1f} ms over {latency['samples']:,} decisions "
            f"({latency['missing']} missing); "
            + (
                f"caught up {caught:.1f}s after the last event"
                if caught is not None
                else f"NOT caught up {args.drain_timeout:.0f}s after the last event"
            )
        )
    print(f"  broker RSS at the end: {' + '.join(mb(v) for v in broker_rss)}")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"  load average at the end (1/5/15 min): {load}; at the start: {args.load_at_start}")
    if args.json:
        print(
            json.dumps(
                {
                    "broker": args.broker,
                    "guarantee": guarantee,
                    "runs": args.runs,
                    "results": results,
                    "latency": latency,
                    "memory": memory,
                }
            )
        )


if __name__ == "__main__":
    sys.exit(main())
