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
                              [--worker loopguard|echo|loopguard,echo] [--json]

``--worker echo`` runs the same phases against the bare aiokafka echo of
``bench/forwarders.py`` (it answers each fetched batch with its runs' watermarks and decides
nothing): the shortest answer any worker gives on this broker and machine. Both legs print
the latency to the run's watermark at its last event (what a gateway's ``before_tool`` waits
for; the echo has no decisions), and ``--worker loopguard,echo`` (each on a fresh broker)
prints loopguard's p99 beside the echo's: an absolute latency target measured against the
floor of the same run.

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
from bench.lab.e2e_report import print_floor, print_leg
from bench.lab.harness import (
    CONFIG,
    ROLES,
    GroupProgress,
    WorkerHistograms,
    cpu_seconds,
    event_age_figures,
    round_figures,
    stage_age_figures,
    start_forwarder,
    start_roles,
    wait_until_echoing,
    worker_histograms,
    worker_ready,
)
from bench.lab.heard import sentinel_ids
from bench.lab.options import comma_list
from bench.lab.throughput_drain import process_cpu
from streams.core.engine import LoopGuard
from streams.core.events import CompactionRetry, Decision, Envelope, ToolCall, ToolResult
from streams.core.fleet import fleet_from_document
from streams.devtools.embedded_broker import free_port
from streams.devtools.worker_process import WorkerProcess, wait_until_processing
from streams.gateway.client import GatewayClient
from streams.kafka.topics import ensure_topics
from streams.settings import Settings
from streams.wire.avro import RunWatermark, encode_event

PARTITIONS = 4
LOOP_RUN_EVENTS = 7  # compaction_loop_run's: its last event's seq


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


WORKERS = ("loopguard", "echo")  # echo: bench/forwarders.py's, no decisions


def parse_args() -> argparse.Namespace:
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
    parser.add_argument(
        "--worker",
        default="loopguard",
        help="loopguard (default), echo (the bare aiokafka loop that only answers with "
        "watermarks: the floor of any worker here) or loopguard,echo: each on a fresh "
        "broker, in this order, then loopguard's watermark latency beside the echo's",
    )
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    add_broker_arg(parser)
    args = parser.parse_args()
    args.workers = comma_list(args.worker, WORKERS)
    if args.workers is None:
        parser.error(f"--worker takes loopguard, echo or loopguard,echo, not {args.worker!r}")
    return args


def main() -> int:
    args = parse_args()
    legs = [run_leg(args, worker) for worker in args.workers]
    for leg in legs:
        print_leg(args, leg)
    print_floor(args, legs)
    if args.json:
        print(json.dumps(legs[0] if len(legs) == 1 else {"legs": legs}))
    return 0


def percentiles(latencies: list[float]) -> dict[str, float]:
    """p50, p90, p99 and max of sorted latencies (ms)."""
    return {
        "p50": statistics.median(latencies),
        "p90": latencies[int(len(latencies) * 0.90) - 1],
        "p99": latencies[int(len(latencies) * 0.99) - 1],
        "max": latencies[-1],
    }


def run_leg(args: argparse.Namespace, worker_kind: str) -> dict:
    """The throughput burst then the latency phase against one worker (loopguard or the
    echo) on a fresh broker; its figures."""
    echo = worker_kind == "echo"
    tmp = Path(tempfile.mkdtemp(prefix="loopguard-bench-"))
    db_url = args.db or f"sqlite:///{tmp / 'audit.db'}"
    config_file = tmp / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    broker = start_broker(args.broker, tmp)
    processes: list[WorkerProcess] = []
    arrivals: dict[str, float] = {}  # run id -> its first decision
    reached: dict[str, float] = {}  # run id -> its watermark at its last event (seq 7)
    arrived = threading.Condition()

    def on_decision(decision: Decision) -> None:
        with arrived:
            arrivals.setdefault(decision.run_id, time.perf_counter())
            arrived.notify_all()

    def on_watermark(mark: RunWatermark) -> None:
        if mark.seq >= LOOP_RUN_EVENTS:
            with arrived:
                reached.setdefault(mark.run_id, time.perf_counter())
                arrived.notify_all()

    answered = reached if echo else arrivals  # what ends the burst
    try:
        ensure_topics(
            Settings.for_profile(broker.profile, broker=broker.url, partitions=PARTITIONS)
        )
        web_port: int | None = None
        if echo:
            processes = start_forwarder("echo", broker, "loopguard", PARTITIONS, tmp)
        else:
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

        def scrape() -> WorkerHistograms:
            return WorkerHistograms({}, {}, {}) if web_port is None else worker_histograms(web_port)

        worker = processes[0]  # role all, or the guard, or the echo
        client = GatewayClient(
            broker.bootstrap,
            "bench-gw",
            on_decision=on_decision,
            on_watermark=on_watermark,
            fetch_max_wait_ms=gateway_fetch_wait_ms(broker.profile),
        )
        if echo:
            wait_until_echoing(client, worker, "bench-probe")
        else:
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
        rounds_start = scrape().rounds
        assert worker.process is not None
        cpu_before = cpu_seconds(worker.process.pid)
        all_before = sum(process_cpu(processes))
        start = time.perf_counter()
        for key, value in encoded:
            producer.send(topic, key=key, value=value)
        producer.flush()
        produced_in = time.perf_counter() - start
        with arrived:
            arrived.wait_for(lambda: all(s in answered for s in sentinels), timeout=600)
        elapsed = max(answered[s] for s in sentinels) - start
        decided_cpu_us = (cpu_seconds(worker.process.pid) - cpu_before) / len(encoded) * 1e6
        e2e_rate = len(encoded) / elapsed
        # Exactly once with immediate control delivery, decisions arrive before the state
        # and offsets that follow them are committed: the burst is done once those are.
        wait_committed(broker.bootstrap, "loopguard", topic, timeout=600)
        committed_in = time.perf_counter() - start
        rounds_burst = scrape().rounds
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
                before = scrape()
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
            arrived.wait_for(lambda: all(r in answered for r in sent_at), timeout=120)
        after = scrape()
        before = before or after  # a phase too short to reach its measured part
        warm = sorted(
            (answered[r] - sent_at[r]) * 1000
            for r in sent_at
            if r in answered and sent_at[r] < measured_from
        )
        sent_at = {r: at for r, at in sent_at.items() if at >= measured_from}
        with arrived:
            decided = sorted((arrivals[r] - sent_at[r]) * 1000 for r in sent_at if r in arrivals)
            marked = sorted((reached[r] - sent_at[r]) * 1000 for r in sent_at if r in reached)
        # the slowest answers, with when (s into the phase) their run's last event went out
        started = min(sent_at.values())
        slowest = sorted(
            ((answered[r] - sent_at[r]) * 1000, sent_at[r] - started)
            for r in sent_at
            if r in answered
        )[-8:]
        client.close()
        producer.close()
    finally:
        for process in processes:
            process.stop()
        broker.stop()
    decisions = percentiles(decided) if decided else None
    watermarks = percentiles(marked)
    return {
        "worker": worker_kind,
        "e2e_events_per_s": round(e2e_rate),
        "core_events_per_s": round(core_rate),
        "ratio": round(e2e_rate / core_rate, 4),
        "roles": args.roles,
        "worker_cpu_us_per_event": round(worker_cpu_us, 1),
        "decided_cpu_us_per_event": round(decided_cpu_us, 1),
        "all_processes_cpu_us_per_event": round(all_cpu_us, 1),
        "events": len(encoded),
        "elapsed_s": elapsed,
        "produced_in_s": produced_in,
        "committed_in_s": committed_in,
        "committed_events_per_s": round(len(encoded) / committed_in),
        "latency_p50_ms": None if decisions is None else round(decisions["p50"], 2),
        "latency_p99_ms": None if decisions is None else round(decisions["p99"], 2),
        "latency_p90_ms": None if decisions is None else round(decisions["p90"], 2),
        "latency_max_ms": None if decisions is None else round(decisions["max"], 2),
        "watermark_p50_ms": round(watermarks["p50"], 2),
        "watermark_p99_ms": round(watermarks["p99"], 2),
        "watermark_max_ms": round(watermarks["max"], 2),
        "slowest": slowest,
        "warmup_s": args.warmup,
        "warmup_p50_ms": round(statistics.median(warm), 2) if warm else None,
        "warmup_latency_max_ms": round(warm[-1], 2) if warm else None,
        "rate": args.rate,
        "decisions": len(decided),
        "missing": len(sent_at) - len(decided if not echo else marked),
        "watermarks": len(marked),
        **event_age_figures(before.ages, after.ages),
        "stage_ages": stage_age_figures(before.stages, after.stages),
        "settle_rounds_burst": round_figures(rounds_start, rounds_burst),
        "settle_rounds_latency": round_figures(before.rounds, after.rounds),
    }
