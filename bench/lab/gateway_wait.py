"""What in-time enforcement costs a gateway: before_tool latency with and without the wait.

Starts tansu or a 3-node Apache Kafka cluster (``--broker``), one worker (loop detection on)
and, for each wait budget, the same load through the Python client
(``streams.gateway.client``) and then through the TypeScript client (``clients/typescript``,
``test/bench-wait.ts``, built here if needed): ``--runs`` concurrent runs in one gateway client
together offer ``--rate`` tool calls/s, evenly spread (run i calls at i/rate s, then every
runs/rate s); each call is before_tool (which waits for the run's RunWatermark, at most the
budget) then after_tool, with arguments that never repeat (no decisions: the wait itself is
measured). The latency is before_tool's duration, over the calls that start after
``--warmup`` seconds, for ``--seconds``.

Budgets: 0 (no waiting: the baseline), 50 ms (the default; its timeouts are counted) and
``--long-budget-ms`` (default 2000: long enough that the wait is rarely cut short, so it shows
the whole wait). Printed side by side per client:

    python bench/gateway_wait_bench.py [--broker tansu|kafka] [--rate 1000] [--runs 400]
        [--seconds 10] [--warmup 2] [--long-budget-ms 2000] [--clients python,typescript]
        [--json]

The Python client runs a thread per run (it is synchronous); the TypeScript client runs every
run on one Node event loop (``--ts-processes N`` splits its runs and rate over N processes:
on a busy machine one event loop gets one thread's share of CPU, 400 Python threads far more).
The Python client logs every timeout (the TypeScript one at most
once a minute): its logger is raised to ERROR here, so stderr output is not what is measured.
Everything runs on loopback and stops by itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.lab.brokers import add_broker_arg, gateway_fetch_wait_ms, start_broker
from bench.lab.harness import CONFIG, cpu_seconds, start_workers
from bench.lab.heard import sentinel_ids
from streams.core.events import Action
from streams.devtools.worker_process import wait_until_processing
from streams.gateway.client import GatewayClient
from streams.kafka.topics import ensure_topics
from streams.settings import Settings, Topics

PARTITIONS = 4
PREFIX = "loopguard"  # the worker's default (LOOPGUARD_TOPIC_PREFIX unset)
TOPICS = Topics.with_prefix(PREFIX)
# LOOPGUARD_BENCH_TS_DIR: another build of the client (e.g. an older commit's, to compare).
TS_DIR = Path(
    os.environ.get("LOOPGUARD_BENCH_TS_DIR")
    or Path(__file__).resolve().parents[2] / "clients" / "typescript"
)
TS_BENCH = TS_DIR / "build" / "test" / "bench-wait.js"


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (nan when empty)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 1))))
    return sorted_values[rank - 1]


def summarise(
    client: str, budget: float, latencies: list[float], lateness: list[float], **extra: Any
) -> dict[str, Any]:
    values = sorted(latencies)
    late = sorted(lateness)
    return {
        "client": client,
        "budget_ms": budget,
        "calls": len(values),
        "p50_ms": round(percentile(values, 0.50), 2),
        "p99_ms": round(percentile(values, 0.99), 2),
        "max_ms": round(values[-1], 2) if values else float("nan"),
        "late_p50_ms": round(percentile(late, 0.50), 2),
        "late_p99_ms": round(percentile(late, 0.99), 2),
        **extra,
    }


# ------------------------------------------------------------------------------- Python


def python_phase(
    bootstrap: str, topics: Topics, budget: float, args: argparse.Namespace
) -> dict[str, Any]:
    client = GatewayClient(
        bootstrap,
        f"bench-py-{budget:g}",
        topics=topics,
        wait_budget_ms=budget,
        fetch_max_wait_ms=gateway_fetch_wait_ms(args.broker),
    )
    latencies: list[float] = []
    lateness: list[float] = []  # how late calls start against their slot (CPU starvation)
    timed_out = [0]
    calls = [0]
    count_lock = threading.Lock()
    period = args.runs / args.rate
    start = time.perf_counter() + 0.5
    measure_from = start + args.warmup
    stop_at = measure_from + args.seconds

    def drive(index: int) -> None:
        run = client.start_run("bench-py")
        next_at = start + index / args.rate
        n = 0
        while True:
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t0 = time.perf_counter()
            if t0 >= stop_at:
                break
            call_args = {"path": f"src/file_{index}_{n}.py", "line": n}
            verdict = run.before_tool("read_file", call_args)
            took = (time.perf_counter() - t0) * 1000
            with count_lock:
                calls[0] += 1
            if t0 >= measure_from:
                latencies.append(took)
                lateness.append((t0 - next_at) * 1000)
                if verdict.timed_out:
                    with count_lock:
                        timed_out[0] += 1
            if verdict.allowed:
                run.after_tool("read_file", call_args, result={"content": f"line {n}"})
            next_at += period
            n += 1
        run.end()

    threads = [threading.Thread(target=drive, args=(i,), daemon=True) for i in range(args.runs)]
    cpu_before = time.process_time()  # every thread of this process: the client's cost
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu = time.process_time() - cpu_before
    client.close()
    return summarise(
        "python",
        budget,
        latencies,
        lateness,
        achieved_rate=round(len(latencies) / args.seconds),
        timeouts=timed_out[0],
        cpu_ms_per_call=round(cpu * 1000 / max(calls[0], 1), 2),
        all_calls=calls[0],
    )


# --------------------------------------------------------------------------- TypeScript


def ensure_ts_build() -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise SystemExit("the TypeScript client needs node (>= 20) and npm on PATH")
    if not (TS_DIR / "node_modules").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=TS_DIR, check=True)
    subprocess.run([npm, "run", "--silent", "build:test"], cwd=TS_DIR, check=True)


def typescript_phase(bootstrap: str, prefix: str, budget: float, args: argparse.Namespace):
    """The load from ``--ts-processes`` Node processes (one GatewayClient each), sharing the
    runs and the offered rate evenly."""
    n = args.ts_processes
    cmd = ["node", str(TS_BENCH), "--brokers", bootstrap, "--prefix", prefix]
    cmd += ["--rate", f"{args.rate / n:g}", "--runs", str(args.runs // n)]
    cmd += ["--seconds", str(args.seconds), "--warmup", str(args.warmup)]
    cmd += ["--wait-budget-ms", f"{budget:g}"]
    if args.broker == "tansu" and not os.environ.get("LOOPGUARD_BENCH_TS_DIR"):
        cmd += ["--max-events-per-partition", "1"]  # tansu's end offsets (docs/design.md)
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=args.seconds * 20 + 120)
        if proc.returncode != 0:
            raise RuntimeError(f"bench-wait.js failed:\n{err[-4000:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    calls = sum(r["calls"] for r in reports)
    return summarise(
        "typescript",
        budget,
        [x for r in reports for x in r["latenciesMs"]],
        [x for r in reports for x in r["latenessMs"]],
        achieved_rate=round(sum(r["achievedRate"] for r in reports)),
        timeouts=sum(r["timedOut"] for r in reports),
        publish_errors=sum(r["stats"]["publishErrors"] for r in reports),
        # produce requests per event published (1.0: one request per event, issue 24)
        requests_per_event=round(
            sum(r["stats"].get("sendRequests", r["stats"]["published"]) for r in reports)
            / max(sum(r["stats"]["published"] for r in reports), 1),
            3,
        ),
        cpu_ms_per_call=round(sum(r["cpuSeconds"] for r in reports) * 1000 / max(calls, 1), 2),
        event_loop_delay_p99_ms=round(max(r["eventLoopDelayMs"]["p99"] for r in reports), 1),
        processes=n,
        all_calls=calls,
    )


# ---------------------------------------------------------------------------------- main


def drain(probe: GatewayClient, phase: int, timeout: float = 900.0) -> float:
    """Seconds until the worker has processed everything produced so far: a sentinel run per
    partition (compaction + 3 identical cycles) whose abort must come back."""
    started = time.perf_counter()
    runs = []
    for run_id in sentinel_ids(f"drain{phase}", PARTITIONS):
        run = probe.start_run("bench-drain", run_id=run_id)
        run.compaction()
        for _ in range(3):
            run.before_tool("drain_probe", {"probe": True})
            run.after_tool("drain_probe", {"probe": True}, result={"status": "same"})
        run.end("drain")
        runs.append(run)
    for run in runs:
        remaining = max(timeout - (time.perf_counter() - started), 0.01)
        probe.wait_for(
            run.run_id, lambda ds: any(d.action is Action.ABORT for d in ds), timeout=remaining
        )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000, help="offered tool calls/s")
    parser.add_argument("--runs", type=int, default=400, help="concurrent runs per client")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per phase")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured start per phase")
    parser.add_argument("--budget-ms", type=float, default=50.0, help="the default budget")
    parser.add_argument("--long-budget-ms", type=float, default=2000.0, help="a long budget")
    parser.add_argument("--clients", default="python,typescript")
    parser.add_argument(
        "--ts-processes", type=int, default=1, help="split the TypeScript load over N processes"
    )
    parser.add_argument("--db", help="audit DB URL (default: SQLite in a temp dir)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    add_broker_arg(parser)
    args = parser.parse_args()
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    logging.getLogger("loopguard.gateway").setLevel(logging.ERROR)
    if "typescript" in clients:
        ensure_ts_build()

    tmp = Path(tempfile.mkdtemp(prefix="loopguard-wait-bench-"))
    db_url = args.db or f"sqlite:///{tmp / 'audit.db'}"
    config_file = tmp / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    broker = start_broker(args.broker, tmp)
    worker = None
    budgets = [0.0, args.budget_ms, args.long_budget_ms]
    results: list[dict[str, Any]] = []
    try:
        settings = Settings.for_profile(
            broker.profile, broker=broker.url, partitions=PARTITIONS, topics=TOPICS
        )
        ensure_topics(settings)
        (worker,) = start_workers(
            broker, 1, tmp, db_url=db_url, config_file=config_file, partitions=PARTITIONS
        )
        probe = GatewayClient(
            broker.bootstrap, "bench-probe", topics=settings.topics, wait_budget_ms=0
        )
        wait_until_processing(probe, workers=[worker])
        for budget in budgets:
            for name in clients:
                assert worker.process is not None
                worker_cpu = cpu_seconds(worker.process.pid)
                if name == "python":
                    result = python_phase(broker.bootstrap, settings.topics, budget, args)
                else:
                    result = typescript_phase(broker.bootstrap, PREFIX, budget, args)
                # Every phase starts on an idle worker; how long it needed to catch up says
                # whether it kept up with the offered load.
                result["drain_s"] = round(drain(probe, len(results)), 1)
                events = 2 * result["all_calls"] + 2 * args.runs  # + RunStarted, RunEnded
                worker_cpu = cpu_seconds(worker.process.pid) - worker_cpu
                result["worker_cpu_us_per_event"] = round(worker_cpu * 1e6 / events)
                results.append(result)
                print(f"  {json.dumps(result)}", flush=True)
                if not worker.alive:
                    raise RuntimeError(f"the worker died; see {worker.log_path}")
        probe.close()
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()

    print(
        f"\ngateway wait benchmark (broker: {args.broker}, 1 worker, {args.runs} runs per client, "
        f"{args.rate} calls/s offered, {args.seconds:g} s measured per phase, loopback;"
        f" load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    print(
        "before_tool latency (ms), how late calls started against their slot (ms: the load"
        " generator's own starvation), calls/s measured, wait timeouts, client CPU per call,"
        " seconds the worker needed after the phase to catch up, worker CPU per event"
        " (phase + catch-up):"
    )
    print(
        f"  {'budget':>9}  {'client':<10}  {'p50':>7} {'p99':>7} {'max':>7}"
        f"  {'late p50':>8} {'late p99':>8}  {'calls/s':>7}  {'timeouts':>8}  {'CPU/call':>8}"
        f"  {'drain':>6}  {'worker CPU/event':>16}"
    )
    label = {"python": "python", "typescript": "typescript"}
    if args.ts_processes > 1:
        label["typescript"] = f"ts x{args.ts_processes}"
    for budget in budgets:
        for name in clients:
            r = next(x for x in results if x["client"] == name and x["budget_ms"] == budget)
            print(
                f"  {budget:>6g} ms  {label[name]:<10}  {r['p50_ms']:7.1f} {r['p99_ms']:7.1f}"
                f" {r['max_ms']:7.1f}  {r['late_p50_ms']:8.1f} {r['late_p99_ms']:8.1f}"
                f"  {r['achieved_rate']:7d}  {r['timeouts']:8d}  {r['cpu_ms_per_call']:6.2f}ms"
                f"  {r['drain_s']:5.1f}s  {r['worker_cpu_us_per_event']:13d} µs"
            )
    for name in clients:
        base = next(x for x in results if x["client"] == name and x["budget_ms"] == 0)
        for budget in budgets[1:]:
            r = next(x for x in results if x["client"] == name and x["budget_ms"] == budget)
            added_p50, added_p99 = r["p50_ms"] - base["p50_ms"], r["p99_ms"] - base["p99_ms"]
            print(
                f"  {label[name]}: budget {budget:g} ms adds p50 {added_p50:+.1f} ms,"
                f" p99 {added_p99:+.1f} ms; {r['timeouts']} of {r['calls']}"
                f" calls timed out"
            )
    if args.json:
        print(json.dumps({"broker": args.broker, "results": results}))
    return 0
