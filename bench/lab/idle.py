"""Idle cost (issue 42): the CPU an idle worker and its broker take with no traffic at all.

Starts the broker (tansu embedded, or the 3-node Kafka cluster), measures it alone, then starts
one worker (``--role``), proves it processes events (a canary run decided), closes the gateway
and, after ``--settle`` seconds, counts both processes' CPU seconds (/proc, every thread) over
``--seconds``. Prints each as a share of one core, with the load average beside: on a busy
machine CPU seconds over a fixed window are steadier than wall-clock timings, not exact.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.lab.brokers import add_broker_arg, gateway_fetch_wait_ms, start_broker
from bench.lab.harness import CONFIG, broker_pids, cpu_seconds, load_average, start_workers
from streams.devtools.worker_process import wait_until_processing
from streams.gateway.client import GatewayClient
from streams.kafka.topics import ensure_topics
from streams.settings import Settings

PARTITIONS = 8


def cpu_share(pids: list[int], seconds: float) -> tuple[float, float]:
    """CPU seconds ``pids`` used over the next ``seconds``, and that as a share of one core."""
    before, start = sum(cpu_seconds(pid) for pid in pids), time.monotonic()
    time.sleep(seconds)
    used = sum(cpu_seconds(pid) for pid in pids) - before
    return used, used / (time.monotonic() - start)


def main() -> int:
    args = parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="loopguard-idle-"))
    config_file = tmp / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    broker = start_broker(args.broker, tmp)
    worker = None
    try:
        brokers = broker_pids(broker)
        _, alone = cpu_share(brokers, min(args.seconds, 30.0))
        settings = Settings.for_profile(broker.profile, broker=broker.url, partitions=PARTITIONS)
        ensure_topics(settings)
        (worker,) = start_workers(
            broker,
            1,
            tmp,
            db_url=f"sqlite:///{tmp}/audit.db",
            config_file=config_file,
            partitions=PARTITIONS,
            env={"LOOPGUARD_ROLE": args.role},
        )
        client = GatewayClient(
            broker.bootstrap, "idle-gw", fetch_max_wait_ms=gateway_fetch_wait_ms(broker.profile)
        )
        wait_until_processing(client, workers=[worker])
        client.close()
        time.sleep(args.settle)  # the canary's work done; nothing arrives from here on
        assert worker.process is not None
        pids = [worker.process.pid, *brokers]
        before = {pid: cpu_seconds(pid) for pid in pids}
        start = time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - start
        used = {pid: cpu_seconds(pid) - before[pid] for pid in pids}
        worker_s = used[worker.process.pid]
        broker_s = sum(used[pid] for pid in brokers)
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()
    print(f"loopguard idle cost ({args.broker}, one worker, --role {args.role}, no traffic)")
    print(f"  broker alone, before the worker: {alone:.1%} of a core")
    print(
        f"  over {elapsed:.0f} s idle: worker {worker_s:.2f} CPU s = {worker_s / elapsed:.1%} of a "
        f"core, broker {broker_s:.2f} CPU s = {broker_s / elapsed:.1%} (load {load_average()})"
    )
    if args.json:
        print(
            json.dumps(
                {
                    "seconds": round(elapsed, 1),
                    "worker_cpu_s": round(worker_s, 2),
                    "broker_cpu_s": round(broker_s, 2),
                    "broker_alone_share": round(alone, 4),
                    "load": load_average(),
                }
            )
        )
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_broker_arg(parser)
    parser.add_argument("--seconds", type=float, default=60.0, help="idle window (default 60)")
    parser.add_argument(
        "--settle", type=float, default=10.0, help="wait before measuring (default 10 s)"
    )
    parser.add_argument(
        "--role", choices=["all", "guard"], default="all", help="the worker's role (default all)"
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    return parser.parse_args()
