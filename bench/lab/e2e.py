"""End-to-end figures through one real worker on tansu or a 3-node Apache Kafka cluster.

Prints: sustained events/s through one worker (produce → worker → control topic, and until
the worker has committed every offset: exactly once its decisions come first), decision
latency p50/p99 at a fixed offered rate (event produced → decision received by the gateway
client) once the throughput phase's backlog is committed and after ``--warmup`` seconds at
that rate (reported apart), and the ratio of end-to-end
throughput to the bare detector core on the same events, so a regression anywhere in the
pipeline shows up as a ratio.

    python bench/e2e_bench.py [--broker tansu|kafka] [--events 40000] [--rate 1000]
                              [--seconds 10] [--warmup 2] [--db URL] [--roles all|split]
                              [--json]

``--roles split`` runs the worker as ``LOOPGUARD_ROLE=guard`` plus one ``LOOPGUARD_ROLE=audit``
process (same app id, database and config): CPU per event is then printed for the guard and
for both processes.

Everything runs on loopback and stops by itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from kafka import KafkaProducer

from bench.lab.brokers import add_broker_arg, gateway_fetch_wait_ms, start_broker
from bench.lab.harness import (
    AGE_METRIC,
    CONFIG,
    ROLES,
    ROUND_METRIC,
    GroupProgress,
    WorkerHistograms,
    cpu_seconds,
    event_age_figures,
    round_figures,
    stage_age_figures,
    stage_age_lines,
    start_roles,
    worker_histograms,
    worker_ready,
)
from bench.lab.heard import sentinel_ids
from bench.lab.throughput_drain import process_cpu
from streams.core.engine import LoopGuard, core_build
from streams.core.events import CompactionRetry, Decision, Envelope, ToolCall, ToolResult
from streams.core.fleet import fleet_from_document
from streams.devtools.embedded_broker import free_port
from streams.devtools.worker_process import WorkerProcess, wait_until_processing
from streams.gateway.client import GatewayClient
from streams.kafka.topics import ensure_topics
from streams.settings import Settings
from streams.wire.avro import encode_event

PARTITIONS = 4


def compaction_loop_run(run_id: str, t0: int = 0) -> list:
    """7 events; the last one (3rd identical result after compaction) triggers an abort."""
    events = [CompactionRetry(Envelope(run_id, "bench", "gw", 1, t0))]
    seq = 1
    for _ in range(3):
        seq += 1
        events.append(ToolCall(Envelope(run_id, "bench", "gw", seq, t0), "exec", '{"c":1}'))
        seq += 1
        events.append(
            ToolResult(Envelope(run_id, "bench", "gw", seq, t0), "exec", '{"c":1}', '"same"')
        )
    return events


def busy_run(run_id: str, length: int) -> list:
    """Ordinary varied work: no decisions, exercises hashing and history."""
    events = []
    for i in range(length // 2):
        args = json.dumps({"path": f"src/file_{i}.py", "line": i})
        events.append(ToolCall(Envelope(run_id, "bench", "gw", 2 * i + 1, 0), "read_file", args))
        events.append(
            ToolResult(
                Envelope(run_id, "bench", "gw", 2 * i + 2, 0),
                "read_file",
                args,
                json.dumps({"content": [{"type": "text", "text": f"line {i}"}]}),
            )
        )
    return events


def wait_committed(bootstrap: str, group: str, topic: str, timeout: float) -> None:
    """Return once ``group`` has committed ``topic`` up to its end offsets."""
    progress = GroupProgress(bootstrap, group, topic, PARTITIONS)
    try:
        progress.wait_for(progress.ends(), timeout)
    except TimeoutError as exc:
        raise SystemExit(f"the worker did not commit {topic}: {exc}") from exc
    finally:
        progress.close()


def wait_ready(processes: list[WorkerProcess], timeout: float = 120.0) -> None:
    """Return once every process logged Faust's Ready: the canary proves the guard, not an
    audit process, whose start-up would otherwise fall into the measured burst."""
    deadline = time.monotonic() + timeout
    while not all(worker_ready(p) for p in processes):
        dead = [p for p in processes if not p.alive]
        if dead or time.monotonic() > deadline:
            raise SystemExit(
                f"a worker process is not ready; see {(dead or processes)[0].log_path}"
            )
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=40_000, help="events for throughput")
    parser.add_argument("--rate", type=int, default=1000, help="offered events/s for latency")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency phase duration")
    parser.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        help="seconds at the offered rate before the latency phase, reported apart (a "
        "just-started worker and cluster answer their first second slower)",
    )
    parser.add_argument("--db", help="audit DB URL (default: SQLite in a temp dir)")
    parser.add_argument(
        "--roles",
        choices=ROLES,
        default="all",
        help="all: one worker runs every role (default); split: a LOOPGUARD_ROLE=guard "
        "worker plus a LOOPGUARD_ROLE=audit process",
    )
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    add_broker_arg(parser)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="loopguard-bench-"))
    db_url = args.db or f"sqlite:///{tmp / 'audit.db'}"
    config_file = tmp / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    broker = start_broker(args.broker, tmp)
    processes: list[WorkerProcess] = []
    arrivals: dict[str, float] = {}
    arrived = threading.Condition()

    def on_decision(decision: Decision) -> None:
        with arrived:
            arrivals.setdefault(decision.run_id, time.perf_counter())
            arrived.notify_all()

    try:
        ensure_topics(
            Settings.for_profile(broker.profile, broker=broker.url, partitions=PARTITIONS)
        )
        web_port = free_port()  # its /metrics: how old events were when it took them in
        processes = start_roles(
            broker,
            1,
            tmp,
            roles=args.roles,
            db_url=db_url,
            config_file=config_file,
            partitions=PARTITIONS,
            web_port=web_port,
        )
        worker = processes[0]  # role all, or the guard
        client = GatewayClient(
            broker.bootstrap,
            "bench-gw",
            on_decision=on_decision,
            fetch_max_wait_ms=gateway_fetch_wait_ms(broker.profile),
        )
        wait_until_processing(client, workers=processes)
        wait_ready(processes)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, acks="all")
        topic = Settings().topics.events

        # -- throughput: pre-encoded events as fast as the producer goes ------------------
        events = []
        run_no = 0
        while len(events) < args.events:
            run_no += 1
            if run_no % 4 == 0:
                events += compaction_loop_run(f"tp-{run_no}")
            else:
                events += busy_run(f"tp-{run_no}", 40)
        sentinels = sentinel_ids("tp", PARTITIONS)
        for run_id in sentinels:
            events += compaction_loop_run(run_id)
        encoded = [(e.envelope.run_id.encode(), encode_event(e)) for e in events]
        rounds_start = worker_histograms(web_port).rounds
        assert worker.process is not None
        cpu_before = cpu_seconds(worker.process.pid)
        all_before = sum(process_cpu(processes))
        start = time.perf_counter()
        for key, value in encoded:
            producer.send(topic, key=key, value=value)
        producer.flush()
        produced_in = time.perf_counter() - start
        with arrived:
            arrived.wait_for(lambda: all(s in arrivals for s in sentinels), timeout=600)
        elapsed = max(arrivals[s] for s in sentinels) - start
        decided_cpu_us = (cpu_seconds(worker.process.pid) - cpu_before) / len(encoded) * 1e6
        e2e_rate = len(encoded) / elapsed
        # Exactly once with immediate control delivery, decisions arrive before the state
        # and offsets that follow them are committed: the burst is done once those are.
        wait_committed(broker.bootstrap, "loopguard", topic, timeout=600)
        committed_in = time.perf_counter() - start
        rounds_burst = worker_histograms(web_port).rounds
        worker_cpu_us = (cpu_seconds(worker.process.pid) - cpu_before) / len(encoded) * 1e6
        all_cpu_us = (sum(process_cpu(processes)) - all_before) / len(encoded) * 1e6

        core = LoopGuard(fleet_from_document(CONFIG))
        core_start = time.perf_counter()
        for event in events:
            core.process(event)
        core_rate = len(events) / (time.perf_counter() - core_start)

        # -- latency at a fixed offered rate: one decision per 7-event run -----------------
        sent_at: dict[str, float] = {}
        interval = 1.0 / args.rate
        next_at = time.perf_counter()
        measured_from = next_at + args.warmup
        deadline = measured_from + args.seconds
        before: WorkerHistograms | None = None
        i = 0
        while time.perf_counter() < deadline:
            if before is None and time.perf_counter() >= measured_from:
                before = worker_histograms(web_port)
            run_id = f"lat-{i}"
            run_events = compaction_loop_run(run_id)
            for n, event in enumerate(run_events):
                now = time.perf_counter()
                if next_at > now:
                    time.sleep(next_at - now)
                next_at += interval
                producer.send(topic, key=run_id.encode(), value=encode_event(event))
                if n == len(run_events) - 1:
                    producer.flush()
                    sent_at[run_id] = time.perf_counter()
            i += 1
        with arrived:
            arrived.wait_for(lambda: all(r in arrivals for r in sent_at), timeout=120)
        after = worker_histograms(web_port)
        before = before or after  # a phase too short to reach its measured part
        burst_rounds = round_figures(rounds_start, rounds_burst)
        latency_rounds = round_figures(before.rounds, after.rounds)
        ages = event_age_figures(before.ages, after.ages)
        stages = stage_age_figures(before.stages, after.stages)
        warm = sorted(
            (arrivals[r] - sent_at[r]) * 1000
            for r in sent_at
            if r in arrivals and sent_at[r] < measured_from
        )
        sent_at = {r: at for r, at in sent_at.items() if at >= measured_from}
        latencies = sorted((arrivals[r] - sent_at[r]) * 1000 for r in sent_at if r in arrivals)
        p50 = statistics.median(latencies)
        p99 = latencies[int(len(latencies) * 0.99) - 1]
        p90 = latencies[int(len(latencies) * 0.90) - 1]
        # the slowest decisions, with when (s into the phase) their run's last event went out
        started = min(sent_at.values())
        slowest = sorted(
            ((arrivals[r] - sent_at[r]) * 1000, sent_at[r] - started)
            for r in sent_at
            if r in arrivals
        )[-8:]
        lost = len(sent_at) - len(latencies)
        client.close()
        producer.close()
    finally:
        for process in processes:
            process.stop()
        broker.stop()

    workers = "1 guard worker + 1 audit process" if args.roles == "split" else "1 worker"
    print(
        f"loopguard end-to-end benchmark ({workers}, roles {args.roles}, broker: "
        f"{args.broker}, loopback; build: {core_build()})"
    )
    print(f"  throughput: {len(encoded)} events in {elapsed:.2f}s = {e2e_rate:,.0f} events/s")
    print(
        f"              (producer alone took {produced_in:.2f}s; every decision in at "
        f"{elapsed:.2f}s, everything committed at {committed_in:.2f}s = "
        f"{len(encoded) / committed_in:,.0f} events/s)"
    )
    who = "guard worker" if args.roles == "split" else "worker"
    print(
        f"  {who} CPU per event: {worker_cpu_us:.0f} µs until committed, {decided_cpu_us:.0f} "
        f"µs until decided (= {1e6 / worker_cpu_us:,.0f} events/s if the {who} had a core "
        "to itself)"
    )
    if args.roles == "split":
        print(
            f"  all processes (guard + audit) CPU per event: {all_cpu_us:.0f} µs until the "
            "guard committed (the audit's work after that is not counted)"
        )
    print(f"  bare core on the same events: {core_rate:,.0f} events/s")
    print(f"  end-to-end / core ratio: {e2e_rate / core_rate:.3f}")
    print(
        f"  decision latency at {args.rate} events/s offered: p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms over {len(latencies)} decisions ({lost} missing); p90 {p90:.1f} ms"
    )
    print("  slowest: " + ", ".join(f"{ms:.1f} ms at {at:.1f} s" for ms, at in reversed(slowest)))
    if warm:
        print(
            f"  warm-up before it ({args.warmup:g} s at the same rate, not counted above): "
            f"p50 {statistics.median(warm):.1f} ms, max {warm[-1]:.1f} ms "
            f"over {len(warm)} decisions"
        )
    print(
        f"  events' age when the worker took them in (its {AGE_METRIC} histogram, latency "
        f"phase, {ages['events_aged']} events): p50 <= {_ms(ages['event_age_p50_max_ms'])}, "
        f"p99 <= {_ms(ages['event_age_p99_max_ms'])} (bucket bounds): "
        "the broker path before the worker"
    )
    for line in stage_age_lines(stages):
        print(line)
    for phase, figures in (("burst", burst_rounds), ("latency phase", latency_rounds)):
        if figures["rounds"]:
            print(
                f"  settling rounds (its {ROUND_METRIC}, exactly once), {phase}: "
                f"{figures['rounds']}, p50 <= {_ms(figures['p50_max_ms'])}, "
                f"p99 <= {_ms(figures['p99_max_ms'])} (bucket bounds): how far committed "
                "state trailed the decisions"
            )
    if args.json:
        print(
            json.dumps(
                {
                    "e2e_events_per_s": round(e2e_rate),
                    "core_events_per_s": round(core_rate),
                    "ratio": round(e2e_rate / core_rate, 4),
                    "roles": args.roles,
                    "worker_cpu_us_per_event": round(worker_cpu_us, 1),
                    "all_processes_cpu_us_per_event": round(all_cpu_us, 1),
                    "committed_events_per_s": round(len(encoded) / committed_in),
                    "latency_p50_ms": round(p50, 2),
                    "latency_p99_ms": round(p99, 2),
                    "latency_p90_ms": round(p90, 2),
                    "latency_max_ms": round(latencies[-1], 2),
                    "warmup_s": args.warmup,
                    "warmup_latency_max_ms": round(warm[-1], 2) if warm else None,
                    "rate": args.rate,
                    "decisions": len(latencies),
                    "missing": lost,
                    "event_age_p50_max_ms": ages["event_age_p50_max_ms"],
                    "event_age_p99_max_ms": ages["event_age_p99_max_ms"],
                    "stage_ages": stages,
                    "settle_rounds_burst": burst_rounds,
                    "settle_rounds_latency": latency_rounds,
                }
            )
        )
    return 0


def _ms(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms:g} ms"
