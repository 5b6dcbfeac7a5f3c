"""Bounded load generator: many concurrent runs through N loopguard workers it starts itself.

Starts a broker (``--broker tansu``, the embedded one with memory storage, or ``kafka``, a
3-node Apache Kafka cluster on loopback), N workers of one Faust app (SQLite audit trail
in a temp dir, or ``--db URL``) and a gateway client, then produces a pre-encoded mix of runs
with kafka-python at ``--rate`` (default unlimited): mostly ordinary varied tool cycles, some
loops (generic repeat, ping-pong, loops that survive a context compaction); every run ends with
RunEnded. All runs are in flight at once (round robin over ``--concurrency`` active runs), so
the workers hold that many run states. Producing stops by itself after ``--events`` or
``--seconds``, whichever comes first (runs cut short still get their RunEnded); draining is
bounded by ``--drain-timeout``. ``--waves N`` repeats the load with new runs after the ended
ones expired, to see whether worker memory is reused or keeps growing.

Prints progress lines while it runs and, per wave:

* events/s sustained end to end: time from the first event produced until the decision of
  every sentinel run (one per partition, produced last) arrived;
* decision latency p50/p99: decision-triggering event produced -> its decision received by a
  gateway client (``on_decision``); at an unlimited rate this includes the backlog's queueing;
* decisions expected (the same events through the pure core) vs received;
* worker RSS (VmRSS from /proc/PID/status) before the load, at peak, after the runs ended and
  after the ended runs expired (workers run with ``LOOPGUARD_RUN_IDLE_TTL=--idle-ttl``);

then the ``runs`` table size over time, rebuilt from its changelog topic (the worker writes a
tombstone per expired run), and the memory per active run measured in-process: ``--run-mem``
RunStates with 30-call histories built through LoopGuard under tracemalloc.

    python bench/load_gen.py [--broker tansu|kafka] [--workers 2] [--runs 2000]
                             [--events 60000] [--seconds 300] [--rate 0] [--idle-ttl 30]
                             [--waves 1] [--db URL] [--json]

The issue's targets are ``--runs 10000 --events 1000000``: give ``--idle-ttl`` well above
runs / (events/s) then, or active runs expire between two of their own events.
Everything runs on loopback.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka import KafkaProducer

from bench.lab.brokers import add_broker_arg, gateway_fetch_wait_ms, start_broker
from bench.lab.changelog_sizes import table_sizes
from bench.lab.harness import (
    CONFIG,
    RssSampler,
    broker_pids,
    mb,
    percentile,
    rss_kb,
    start_workers,
)
from bench.lab.heard import Decisions, sentinel_ids
from bench.lab.run_memory import memory_per_run
from bench.lab.run_plans import KINDS, Plan, compaction_loop_run, make_plan
from streams.core.events import (
    Envelope,
    RunEnded,
)
from streams.devtools.worker_process import wait_until_processing
from streams.gateway.client import GatewayClient
from streams.kafka.topics import ensure_topics
from streams.settings import Settings
from streams.wire.avro import encode_event

APP_ID = "loopguard"
EXPIRE_TIMER_INTERVAL = 10.0  # streams.worker.agents.WorkerAgents.expire_runs
# ------------------------------------------------------------------------------ measuring


# ---------------------------------------------------------------------------------- main


@dataclass
class Wave:
    """Figures of one wave of load."""

    number: int
    plan: Plan
    produced: int = 0
    produced_in: float = 0.0
    cut: bool = False
    drained: bool = False
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    expected: int = 0
    received: int = 0
    missing: int = 0
    unexpected: int = 0
    rss_before: list[int | None] = field(default_factory=list)
    rss_peak: list[int] = field(default_factory=list)
    rss_ended: list[int | None] = field(default_factory=list)
    rss_expired: list[int | None] | None = None
    ended_wall: float = 0.0
    expired_wall: float = 0.0

    @property
    def rate(self) -> float:
        return self.produced / self.elapsed if self.elapsed else 0.0


def run_wave(
    args: argparse.Namespace,
    number: int,
    producer: KafkaProducer,
    topic: str,
    heard: Decisions,
    sampler: RssSampler,
    expiry_wait: float,
) -> Wave:
    sentinels = sentinel_ids(f"load{number}", args.partitions)
    sentinel_events = [compaction_loop_run(s) for s in sentinels]
    reserve = sum(map(len, sentinel_events))
    built = time.perf_counter()
    plan = make_plan(args, reserve, number)
    kinds = {k: plan.run_kinds.count(k) for k in KINDS}
    print(
        f"wave {number}: {len(plan.values):,} events in {len(plan.run_ids):,} runs {kinds}, "
        f"{sum(plan.triggers.values()):,} decisions expected, mean run "
        f"{statistics.mean(plan.run_lengths):.0f} events, +{reserve} sentinel events "
        f"(built and encoded in {time.perf_counter() - built:.1f}s)",
        flush=True,
    )
    wave = Wave(number, plan)
    wave.rss_before = sampler.sample()
    sent_at: dict[tuple[str, int], float] = {}
    triggers = plan.triggers
    last_seq = [0] * len(plan.run_ids)
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    stop_progress = threading.Event()

    heard_before = heard.count

    def progress() -> None:
        while not stop_progress.wait(args.progress):
            values = sampler.samples[-1][1]
            rss, broker_rss = values[: args.workers], sum(v or 0 for v in values[args.workers :])
            print(
                f"  [wave {number} {time.perf_counter() - start:6.1f}s] produced "
                f"{wave.produced:,}, decisions seen {heard.count - heard_before:,}, worker RSS "
                f"{' + '.join(mb(v) for v in rss)}, broker RSS {mb(broker_rss)}",
                flush=True,
            )

    start = time.perf_counter()
    threading.Thread(target=progress, name="progress", daemon=True).start()
    deadline = start + args.seconds
    next_at = start
    send = producer.send
    try:
        for i, (key, value) in enumerate(zip(plan.keys, plan.values, strict=True)):
            now = time.perf_counter()
            if interval:
                if next_at > now:
                    time.sleep(next_at - now)
                next_at += interval
            if now > deadline:
                wave.cut = True
                break
            send(topic, key=key, value=value)
            run_index = plan.runs[i]
            seq = last_seq[run_index] = plan.seqs[i]
            trigger = (plan.run_ids[run_index], seq)
            if trigger in triggers:
                sent_at[trigger] = time.perf_counter()
            wave.produced += 1
        if wave.cut:  # runs cut short still end
            for index, seq in enumerate(last_seq):
                if 0 < seq < plan.run_lengths[index]:
                    run_id = plan.run_ids[index]
                    ended = RunEnded(Envelope(run_id, "agent", "gw", seq + 1, 0), "cut")
                    send(topic, key=run_id.encode(), value=encode_event(ended))
                    wave.produced += 1
        for events in sentinel_events:
            for event in events:
                send(topic, key=event.envelope.run_id.encode(), value=encode_event(event))
                wave.produced += 1
        producer.flush()
        wave.produced_in = time.perf_counter() - start
        wave.drained = heard.wait_runs(sentinels, args.drain_timeout)
        with heard.cond:
            end = max((heard.by_run[s] for s in sentinels if s in heard.by_run), default=0.0)
        wave.elapsed = (end if wave.drained else time.perf_counter()) - start
        time.sleep(1.0)  # the other partitions' last control messages
        wave.rss_ended = sampler.sample()
        wave.ended_wall = time.time()
        wave.rss_peak = sampler.peak_between(start, time.perf_counter())
    finally:
        stop_progress.set()
    if expiry_wait > 0:
        print(f"  waiting {expiry_wait:.0f}s for ended runs to expire ...", flush=True)
        time.sleep(expiry_wait)
        wave.rss_expired = sampler.sample()
    wave.expired_wall = time.time()

    with heard.cond:
        received = dict(heard.by_event)
    wave.latencies = sorted(
        (received[t] - sent) * 1000 for t, sent in sent_at.items() if t in received
    )
    wave.expected = sum(triggers[t] for t in sent_at)
    run_set = set(plan.run_ids)
    wave.received = sum(1 for t in received if t[0] in run_set)
    wave.missing = sum(1 for t in sent_at if t not in received)
    wave.unexpected = sum(1 for t in received if t[0] in run_set and t not in triggers)
    return wave


def report_wave(args: argparse.Namespace, wave: Wave, pids: list[int], hwm: list) -> None:
    p50 = statistics.median(wave.latencies) if wave.latencies else float("nan")
    p99 = percentile(wave.latencies, 0.99)
    print(
        f"  wave {wave.number}: offered {wave.produced:,} events "
        f"({len(wave.plan.run_ids):,} runs, {args.concurrency:,} in flight) at "
        f"{'unlimited rate' if not args.rate else f'{args.rate:,.0f} events/s'}; producer "
        f"took {wave.produced_in:.1f}s" + (" (cut by --seconds)" if wave.cut else "")
    )
    print(
        f"    sustained end to end: {wave.produced:,} events in {wave.elapsed:.1f}s = "
        f"{wave.rate:,.0f} events/s"
        + ("" if wave.drained else f"  (NOT drained within {args.drain_timeout:.0f}s)")
    )
    print(
        f"    decision latency (trigger produced -> decision received): p50 {p50:,.0f} ms, "
        f"p99 {p99:,.0f} ms over {len(wave.latencies):,} triggering events"
        + (" (unlimited rate: includes the backlog)" if not args.rate else "")
    )
    print(
        f"    decisions: expected {wave.expected:,} on produced events, received on "
        f"{wave.received:,} events; triggering events without a decision {wave.missing:,}, "
        f"decisions on unexpected events {wave.unexpected:,}"
    )
    for i, pid in enumerate(pids):
        print(
            f"    worker {i} (pid {pid}) RSS: before {mb(wave.rss_before[i])}, peak "
            f"{mb(wave.rss_peak[i])}, after runs ended {mb(wave.rss_ended[i])}"
            + (f", after expiry {mb(wave.rss_expired[i])}" if wave.rss_expired else "")
        )
    n = len(pids)
    total = sum(v or 0 for v in wave.rss_before[:n])
    print(
        f"    all workers RSS: before {mb(total)}, peak {mb(sum(wave.rss_peak[:n]))}, after "
        f"runs ended {mb(sum(v or 0 for v in wave.rss_ended[:n]))}"
        + (
            f", after expiry {mb(sum(v or 0 for v in wave.rss_expired[:n]))}"
            if wave.rss_expired
            else ""
        )
        + f"; peak - before = {(sum(wave.rss_peak[:n]) - total) / 1024:,.0f} MB"
    )
    print(
        f"    broker ({args.broker}) RSS: before {mb(sum(v or 0 for v in wave.rss_before[n:]))}, "
        f"after runs ended {mb(sum(v or 0 for v in wave.rss_ended[n:]))}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--runs", type=int, default=2000, help="runs per wave (default 2000)")
    parser.add_argument(
        "--events", type=int, default=60_000, help="events per wave (default 60000)"
    )
    parser.add_argument(
        "--seconds", type=float, default=300.0, help="max producing time per wave (300)"
    )
    parser.add_argument("--rate", type=float, default=0, help="offered events/s (0 = unlimited)")
    parser.add_argument("--concurrency", type=int, help="runs in flight at once (default all)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (default 4)")
    parser.add_argument(
        "--idle-ttl", type=float, default=30.0, help="workers' LOOPGUARD_RUN_IDLE_TTL (default 30)"
    )
    parser.add_argument(
        "--expiry-wait",
        type=float,
        help="wait after each wave for ended runs to expire "
        "(default min(idle-ttl, 300) + 2 timer ticks; 0 = skip)",
    )
    parser.add_argument(
        "--waves", type=int, default=1, help="repeat the load with new runs (memory reuse)"
    )
    parser.add_argument("--drain-timeout", type=float, default=600.0, help="max wait to drain")
    parser.add_argument("--db", help="audit DB URL (default: SQLite in a temp dir)")
    parser.add_argument("--progress", type=float, default=5.0, help="progress line every N s")
    parser.add_argument(
        "--run-mem", type=int, default=10_000, help="K runs for tracemalloc (0 = skip)"
    )
    parser.add_argument("--no-changelog-scan", action="store_true", help="skip table sizes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    add_broker_arg(parser)
    args = parser.parse_args()
    args.concurrency = args.concurrency or args.runs
    expiry_wait = args.expiry_wait
    if expiry_wait is None:
        expiry_wait = min(args.idle_ttl, 300.0) + 2 * EXPIRE_TIMER_INTERVAL + 2

    tmp = Path(tempfile.mkdtemp(prefix="loopguard-load-"))
    db_url = args.db or f"sqlite:///{tmp / 'audit.db'}"
    config_file = tmp / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    broker = start_broker(args.broker, tmp)
    workers: list = []
    heard = Decisions()
    sampler = client = producer = None
    waves: list[Wave] = []
    sizes = None
    try:
        settings = Settings.for_profile(
            broker.profile, broker=broker.url, partitions=args.partitions, app_id=APP_ID
        )
        ensure_topics(settings)
        workers = start_workers(
            broker,
            args.workers,
            tmp,
            db_url=db_url,
            config_file=config_file,
            partitions=args.partitions,
            app_id=APP_ID,
            env={"LOOPGUARD_RUN_IDLE_TTL": str(args.idle_ttl)},
        )
        client = GatewayClient(
            broker.bootstrap,
            "load-gw",
            on_decision=heard,
            fetch_max_wait_ms=gateway_fetch_wait_ms(broker.profile),
        )
        wait_until_processing(client, workers=workers, timeout=120)
        # Every partition processing (all workers joined): one compaction loop per partition.
        for round_no in range(2):
            warm = sentinel_ids(f"warm{round_no}", args.partitions)
            for run_id in warm:
                for event in compaction_loop_run(run_id):
                    client.publish(event)
            client.flush()
            if not heard.wait_runs(warm, 120):
                raise RuntimeError(f"warm-up runs not decided; see {tmp}/*worker-*.log")
            time.sleep(1)
        pids = [w.process.pid for w in workers]
        sampler = RssSampler([*pids, *broker_pids(broker)])  # the broker's last
        sampler.start()
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap, linger_ms=5, acks=1, batch_size=256 * 1024
        )
        for number in range(args.waves):
            waves.append(
                run_wave(
                    args, number, producer, settings.topics.events, heard, sampler, expiry_wait
                )
            )
        hwm = [rss_kb(pid, "VmHWM") for pid in pids]
        alive = [w.alive for w in workers]
        rebalances = [
            w.log_path.read_text(errors="replace").count("Executing _on_partitions_assigned")
            for w in workers
        ]
        if not args.no_changelog_scan:
            marks = {}
            for wave in waves:
                marks[f"wave {wave.number} ended"] = wave.ended_wall
                marks[f"wave {wave.number} expired"] = wave.expired_wall
            sizes = table_sizes(broker.bootstrap, f"{APP_ID}-runs-changelog", marks, args.idle_ttl)
    finally:
        if sampler:
            sampler.stop()
        if producer:
            producer.close()
        if client:
            client.close()
        for worker in workers:
            worker.stop()
        broker.stop()

    per_run = serialised = mem_seconds = None
    if args.run_mem:
        per_run, serialised, mem_seconds = memory_per_run(args.run_mem, args.seed)

    print()
    print(
        f"loopguard load: {args.workers} worker(s), {args.partitions} partitions, broker "
        f"{args.broker}, {'SQLite' if not args.db else 'DB ' + args.db.split('://')[0]}, loopback, "
        f"LOOPGUARD_RUN_IDLE_TTL={args.idle_ttl:g}"
    )
    for wave in waves:
        report_wave(args, wave, pids, hwm)
    print(
        "  workers: "
        + "; ".join(
            f"{i}: alive={alive[i]}, partition assignments={rebalances[i]}, VmHWM {mb(hwm[i])}"
            for i in range(len(pids))
        )
    )
    if sizes:
        print(
            f"  runs table, rebuilt from its changelog ({sizes['records']:,} records, "
            f"{sizes['bytes'] / 1_048_576:,.0f} MB, {sizes['tombstones']:,} tombstones; "
            f"{sizes['recreated']:,} runs written again after being expired, "
            f"{sizes['long_gaps']:,} runs with > {args.idle_ttl:g}s between two writes): "
            f"peak {sizes['peak']:,} runs; "
            + ", ".join(f"{name}: {sizes[name]:,}" for name in sizes if name.startswith("wave "))
        )
    if per_run is not None:
        print(
            f"  memory per active run (in-process, tracemalloc, {args.run_mem:,} RunStates "
            f"with 30-call histories): {per_run:,.0f} bytes/run = "
            f"{per_run * 10_000 / 1_048_576:,.0f} MB per 10,000 active runs; changelog "
            f"value {serialised:,.0f} bytes/run (measured in {mem_seconds:.0f}s)"
        )
    print(f"  logs: {tmp}")
    if args.json:
        print(
            json.dumps(
                {
                    "workers": args.workers,
                    "rate_offered": args.rate,
                    "waves": [
                        {
                            "events": w.produced,
                            "runs": len(w.plan.run_ids),
                            "e2e_events_per_s": round(w.rate),
                            "drained": w.drained,
                            "latency_p50_ms": round(statistics.median(w.latencies), 1)
                            if w.latencies
                            else None,
                            "latency_p99_ms": round(percentile(w.latencies, 0.99), 1),
                            "decisions_expected": w.expected,
                            "missing_triggers": w.missing,
                            "rss_before_kb": w.rss_before,
                            "rss_peak_kb": w.rss_peak,
                            "rss_ended_kb": w.rss_ended,
                            "rss_expired_kb": w.rss_expired,
                        }
                        for w in waves
                    ],
                    "rss_hwm_kb": hwm,
                    "table": sizes,
                    "bytes_per_run": None if per_run is None else round(per_run),
                    "changelog_bytes_per_run": None if serialised is None else round(serialised),
                }
            )
        )
    return 0 if all(w.drained for w in waves) and all(alive) else 1
