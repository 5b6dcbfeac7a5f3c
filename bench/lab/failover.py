"""Failover: how long after a worker is SIGKILLed the fleet guards its runs again.

Starts a broker (``--broker kafka``: a 3-node Apache Kafka cluster on loopback, the default;
or ``tansu``), one worker (two with ``--standby``: the second keeps a hot copy of the first's
runs-table partitions, ``LOOPGUARD_STANDBY_REPLICAS``), loads ``--runs`` runs that stay open
(``RunStarted`` and ``--cycles`` tool cycles each, so the runs table holds them all), then
SIGKILLs the worker that owns events partition 0. Without ``--standby`` a replacement worker
starts right after the kill (what an orchestrator does); with it the survivor takes over.

Right after the kill a looping sentinel run (a compaction followed by identical calls,
aborted by the core) is published on each of the killed worker's partitions; the figure is the
time from the kill until every one of them got its decision back at a gateway client. The
taking-over worker's log gives the phases: the group's new assignment, Faust's table recovery
("Restoring state from changelog topics" .. "Done reading from changelog topics", skipped when
nothing is left to read) and "Worker ready".

    python bench/failover_bench.py [--broker kafka|tansu] [--runs 30000] [--standby]
                                   [--cycles 1] [--partitions 4] [--json]

Prints the figures with the load average (the machine may be shared), the broker and the
group/standby settings the workers ran with.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from datetime import datetime
from pathlib import Path

from kafka import KafkaProducer

from bench.lab.brokers import add_broker_arg, gateway_fetch_wait_ms, start_broker
from bench.lab.harness import CONFIG, assignment_complete, owned_partitions
from bench.lab.heard import Decisions, sentinel_ids
from bench.lab.run_plans import RunBuilder, compaction_loop_run
from streams.core.events import RunStarted
from streams.devtools.worker_process import WorkerProcess, wait_until_processing
from streams.gateway.client import GatewayClient
from streams.kafka.topics import ensure_topics
from streams.settings import Settings, Topics
from streams.wire.avro import encode_event

APP_ID = "lgfailover"
ASSIGNED = "events partitions assigned to this worker: "
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")
PHASES = {
    "assigned": ASSIGNED,
    "restoring": "Restoring state from changelog topics",
    "restored": "Done reading from changelog topics",
    "ready": "Worker ready",
}


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def log_times(path: Path, since_epoch: float) -> dict[str, float]:
    """Epoch time of the first line of each phase the worker logged after ``since_epoch``."""
    found: dict[str, float] = {}
    for line in path.read_text(errors="replace").splitlines():
        stamp = STAMP.match(line)
        if not stamp:
            continue
        when = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if when < since_epoch:
            continue
        for phase, marker in PHASES.items():
            if marker in line and phase not in found:
                found[phase] = when
    return found


def open_run_events(run_id: str, cycles: int) -> list[bytes]:
    """A run that stays open: started, ``cycles`` different tool calls, never ended."""
    run = RunBuilder(run_id, f"agent-{hash(run_id) % 10}", "gw-bench", 1_700_000_000_000)
    run.add(RunStarted)
    for i in range(cycles):
        run.cycle("read_file", {"path": f"src/mod_{i}.py"}, {"text": f"line {i}"})
    return [encode_event(e) for e in run.events]


def wait_for(condition, timeout: float, what: str, workers: list[WorkerProcess]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for worker in workers:
            if not worker.alive:
                raise RuntimeError(f"a worker exited; see {worker.log_path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout:.0f}s")
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30_000, help="open runs held (30000)")
    parser.add_argument("--cycles", type=int, default=1, help="tool cycles per run (1)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (4)")
    parser.add_argument(
        "--standby",
        action="store_true",
        help="run a second worker that takes over (standby replicas on); without it a "
        "replacement worker starts after the kill, and the workers run with "
        "LOOPGUARD_STANDBY_REPLICAS=0 unless --replicas says otherwise",
    )
    parser.add_argument("--replicas", type=int, help="LOOPGUARD_STANDBY_REPLICAS for the workers")
    parser.add_argument("--session-timeout", type=float, help="LOOPGUARD_SESSION_TIMEOUT (s)")
    parser.add_argument("--timeout", type=float, default=150.0, help="max wait per phase (150)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    add_broker_arg(parser)
    parser.set_defaults(broker="kafka")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="loopguard-failover-"))
    config_file = tmp / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    load_before = loadavg()
    started = time.monotonic()
    broker = start_broker(args.broker, tmp)
    settings = Settings.for_profile(
        broker.profile,
        broker=broker.url,
        partitions=args.partitions,
        app_id=APP_ID,
        topics=Topics.with_prefix(APP_ID),
    )
    replicas = args.replicas
    if replicas is None:
        replicas = settings.table_standby_replicas if args.standby else 0
    env = {
        "LOOPGUARD_TOPIC_PREFIX": APP_ID,
        "LOOPGUARD_RUN_IDLE_TTL": "86400",  # the loaded runs stay open
        "LOOPGUARD_STANDBY_REPLICAS": str(replicas),
    }
    if args.session_timeout:
        env["LOOPGUARD_SESSION_TIMEOUT"] = str(args.session_timeout)
    session_timeout = args.session_timeout or settings.session_timeout
    workers: list[WorkerProcess] = []

    def new_worker() -> WorkerProcess:
        worker = WorkerProcess(
            broker.url,
            f"sqlite:///{tmp / 'audit.db'}",
            app_id=APP_ID,
            profile=broker.profile,
            log_path=tmp / f"worker-{len(workers)}.log",
            config_file=str(config_file),
            partitions=args.partitions,
            data_dir=str(tmp / f"data-{len(workers)}"),
            env=env,
        ).start()
        workers.append(worker)
        return worker

    heard = Decisions()
    client = producer = None
    result: dict[str, object] = {}
    try:
        ensure_topics(settings)
        new_worker()
        if args.standby:
            new_worker()
        client = GatewayClient(
            broker.bootstrap,
            "failover-gw",
            topics=settings.topics,
            on_decision=heard,
            fetch_max_wait_ms=gateway_fetch_wait_ms(broker.profile),
        )
        wait_until_processing(client, workers=workers, timeout=args.timeout)
        wait_for(
            lambda: assignment_complete(workers, args.partitions),
            args.timeout,
            "every partition assigned",
            workers,
        )
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap, linger_ms=5, acks="all", batch_size=256 * 1024
        )
        load_start = time.monotonic()
        for i in range(args.runs):
            run_id = f"held-{i:06d}"
            for value in open_run_events(run_id, args.cycles):
                producer.send(settings.topics.events, key=run_id.encode(), value=value)
        warm = sentinel_ids("loaded", args.partitions)
        for run_id in warm:
            for event in compaction_loop_run(run_id):
                value = encode_event(event)
                producer.send(settings.topics.events, key=run_id.encode(), value=value)
        producer.flush()
        if not heard.wait_runs(warm, args.timeout):
            raise TimeoutError(f"the loaded runs were not processed in {args.timeout:.0f}s")
        load_seconds = time.monotonic() - load_start
        events = args.runs * (1 + 2 * args.cycles)
        print(
            f"loaded {args.runs:,} open runs ({events:,} events) in {load_seconds:.1f}s "
            f"(load average {loadavg()})",
            flush=True,
        )
        # A standby is fed from the changelog after the active wrote it: give it its few
        # milliseconds (a benchmark, not a test: the figure below is what is measured).
        time.sleep(2.0)

        victim = next(w for w in workers if 0 in (owned_partitions(w) or []))
        partitions = owned_partitions(victim) or []
        sentinels = sentinel_ids("after-kill", args.partitions)  # one per partition
        by_partition = dict(zip(_partitions_of(sentinels, args.partitions), sentinels, strict=True))
        mine = [by_partition[p] for p in partitions]
        load_at_kill = loadavg()
        kill_wall = time.time()
        kill_at = time.monotonic()
        victim.kill()
        killed_at = time.monotonic()
        survivor = next((w for w in workers if w.alive), None) or new_worker()
        for run_id in mine:
            for event in compaction_loop_run(run_id):
                value = encode_event(event)
                producer.send(settings.topics.events, key=run_id.encode(), value=value)
        producer.flush()
        guarded = False
        deadline = time.monotonic() + args.timeout
        while not guarded and time.monotonic() < deadline:
            if not survivor.alive:
                raise RuntimeError(f"the taking-over worker exited; see {survivor.log_path}")
            guarded = heard.wait_runs(mine, 0.5)
        with heard.cond:
            arrivals = [heard.by_run[r] for r in mine if r in heard.by_run]
        # Decisions carry perf_counter times: convert the kill to that clock.
        kill_perf = time.perf_counter() - (time.monotonic() - kill_at)
        first = min(arrivals) - kill_perf if arrivals else float("nan")
        last = max(arrivals) - kill_perf if guarded else float("nan")
        assert survivor.log_path is not None
        phases = log_times(survivor.log_path, kill_wall - 0.5)
        rel = {k: round(v - kill_wall, 2) for k, v in phases.items()}
        recovery = (
            round(phases["restored"] - phases["restoring"], 2)
            if {"restoring", "restored"} <= set(phases)
            else 0.0
        )
        result = {
            "broker": args.broker,
            "runs": args.runs,
            "events_loaded": events,
            "partitions": args.partitions,
            "killed_partitions": partitions,
            "takeover": "standby survivor" if args.standby else "replacement worker",
            "standby_replicas": replicas,
            "session_timeout_s": session_timeout,
            "heartbeat_interval_s": settings.heartbeat_interval,
            "processing_guarantee": settings.processing_guarantee,
            "kill_to_first_decision_s": round(first, 2),
            "kill_to_all_guarded_s": round(last, 2) if guarded else None,
            "phases_after_kill_s": rel,
            "faust_recovery_s": recovery,
            "kill_took_s": round(killed_at - kill_at, 2),
            "load_average": {"start": load_before, "kill": load_at_kill, "end": loadavg()},
        }
    finally:
        if producer:
            producer.close()
        if client:
            client.close()
        for worker in workers:
            worker.kill()
        broker.stop()

    print()
    print(
        f"loopguard failover: broker {result['broker']}, {result['partitions']} partitions, "
        f"{result['runs']:,} open runs held ({result['events_loaded']:,} events), "
        f"{result['processing_guarantee']}, session timeout {result['session_timeout_s']:g}s, "
        f"heartbeat {result['heartbeat_interval_s']:g}s, "
        f"table_standby_replicas={result['standby_replicas']}, takeover by a "
        f"{result['takeover']}"
    )
    print(
        f"  killed the worker of partitions {result['killed_partitions']}: sentinel decisions "
        f"{result['kill_to_first_decision_s']}s (first) / {result['kill_to_all_guarded_s']}s "
        "(every partition of it guarded again) after the SIGKILL"
    )
    print(
        f"  taking-over worker's log, seconds after the kill: {result['phases_after_kill_s']}; "
        f"Faust table recovery (Restoring .. Done reading) {result['faust_recovery_s']}s"
    )
    loads = result["load_average"]
    print(
        f"  load average: {loads['start']} at start, {loads['kill']} at the kill, "  # type: ignore[index]
        f"{loads['end']} at the end; whole bench {time.monotonic() - started:.0f}s; logs {tmp}"  # type: ignore[index]
    )
    if args.json:
        print(json.dumps(result))
    return 0 if result.get("kill_to_all_guarded_s") is not None else 1


def _partitions_of(run_ids: list[str], partitions: int) -> list[int]:
    from kafka.partitioner.default import murmur2

    return [(murmur2(r.encode()) & 0x7FFFFFFF) % partitions for r in run_ids]
