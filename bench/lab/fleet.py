"""A fleet of simulated agents through the real gateway clients: are verdicts in time?

Starts tansu or a 3-node Apache Kafka cluster (``--broker``) and one worker (``--guarantee``:
the broker profile's by default, exactly once on Kafka), then runs the fleet once per client
in ``--clients`` (default both, one after the other on the same worker and topics, each leg
after the worker has caught up): ``python`` is one :class:`GatewayClient` in this process
shared by ``--agents`` simulated agents (a thread each); ``typescript`` is the same agents on
one Node event loop, through one TypeScript ``GatewayClient`` in its own process
(``clients/typescript/bench/fleet-agents.mjs`` against the built ``dist/``; see
``fleet_typescript.py``). Every agent runs tool cycles: ``before_tool`` (which waits at most
``--budget-ms`` for the worker's watermark), then ``after_tool``, then thinks before its next
call. Think times are lognormal with median ``--think-median`` s and shape
``--think-sigma``; a share ``--back-to-back`` of calls follow the previous one at once
(parallel tool calls, a model emitting several calls). A share ``--looping`` of the agents
(the same ones in both legs) repeat one call with one result until the gateway refuses a
call (a block) or aborts the run, then start a new looping run; the others do varied work,
``--run-calls`` calls a run, then start a new run.

Printed per client, over the calls made after ``--warmup`` s:

* decision latency p50/p99: a decision's triggering event published by the gateway ->
  the decision received by the same gateway; and the same for every event, to its run's
  watermark (what ``before_tool`` waits for), which has far more samples;
* ``before_tool``: p50/p99 duration and the share of calls answered within the budget (the
  rest timed out and failed open);
* leaked calls per looping run (p50, p99, max; 0 is the reference): calls the looping agent
  made at or after the call the in-process core (``streams.core.engine.LoopGuard``, the same
  events, decided synchronously) would have refused. The TypeScript process reports each
  looping run's events as it encoded them; they are decoded and replayed here the same way.

    python bench/fleet_bench.py [--broker tansu|kafka] [--clients python,typescript]
        [--worker loopguard|echo|faustecho|loopguard,echo] [--agents 1000] [--seconds 60]
        [--warmup 10] [--think-median 1.5] [--think-sigma 0.8] [--back-to-back 0.2] [--looping 0.05]
        [--budget-ms 50] [--guarantee exactly_once|at_least_once] [--partitions 4] [--json]

``--worker echo`` puts a bare aiokafka loop (``bench/forwarders.py echo``) where the worker
was: it answers each fetched batch at once with its runs' watermarks and decides nothing, so
its share of waits within the budget is the most any worker design can give this fleet on
this machine (no decisions, so no leaked-calls figure). ``--worker faustecho`` answers the
same from one Faust agent built like the worker's, which puts Faust's share of the gap
apart. ``--worker loopguard,echo`` runs both, each on a fresh broker, and prints each
client's legs side by side.

Loops are detected with lowered thresholds (``FLEET_CONFIG``: warning after 4 identical
calls, block after 8) so a looping run meets its block within a short bench. The two
clients draw think times from the same distribution with their own random streams. Everything
runs on loopback and stops by itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lab.brokers import add_broker_arg, gateway_fetch_wait_ms, start_broker
from bench.lab.fleet_agents import (
    CLIENTS,
    ECHOES,
    FLEET_CONFIG,
    WORKERS,
    Agent,
    Measurements,
    WorkerWindow,
    summary,
)
from bench.lab.fleet_typescript import ensure_ts_build, typescript_leg
from bench.lab.harness import (
    AGE_METRIC,
    broker_pids,
    cpu_seconds,
    stage_age_lines,
    start_forwarder,
    start_workers,
    wait_until_echoing,
)
from bench.lab.options import comma_list
from streams.devtools.embedded_broker import free_port
from streams.devtools.worker_process import wait_until_processing
from streams.gateway.client import GatewayClient
from streams.kafka.topics import ensure_topics
from streams.settings import Settings


def python_leg(broker: Any, window: WorkerWindow, args: argparse.Namespace) -> dict[str, Any]:
    """The fleet as threads of this process, through one Python GatewayClient."""
    m = Measurements(measure_from=math.inf)
    client = GatewayClient(
        broker.bootstrap,
        "fleet-gw",
        on_decision=m.on_decision,
        on_watermark=m.on_watermark,
        wait_budget_ms=args.budget_ms,
        fetch_max_wait_ms=gateway_fetch_wait_ms(broker.profile),
    )
    agents: list[Agent] = []
    try:
        start = time.perf_counter()
        m.measure_from = start + args.warmup
        agents = [Agent(i, client, args, m) for i in range(args.agents)]
        for agent in agents:
            agent.start()
        time.sleep(args.warmup)
        window.mark("measuring")
        client_before = cpu_seconds(os.getpid())
        time.sleep(args.seconds)
        window.mark("stopped")
        client_cpu = cpu_seconds(os.getpid()) - client_before
        for agent in agents:
            agent.stop.set()
        for agent in agents:
            agent.join(timeout=10)
        time.sleep(1.0)  # the last decisions in flight
    finally:
        for agent in agents:
            agent.stop.set()
        client.close()
    return summary("python", m, args, window, client_cpu_s=round(client_cpu, 1))


def print_leg(result: dict[str, Any], args: argparse.Namespace) -> None:
    r = result
    print(
        f"fleet benchmark, {r['client']} client ({args.broker}, {args.guarantee}, 1 "
        f"{args.worker + ' (no decisions)' if args.worker in ECHOES else 'worker'}, "
        f"{args.agents} agents, {args.seconds:g} s measured, load average "
        f"{r['load_average']} at the end)"
    )
    print(f"  tool calls: {r['calls']} ({r['calls_per_s']}/s)")
    if args.worker not in ECHOES:
        print(
            f"  decision latency: p50 {r['decision_p50_ms']} ms, p99 {r['decision_p99_ms']} ms "
            f"over {r['decisions']} decisions"
        )
    print(
        f"  event decided (its run's watermark reached it): p50 {r['decided_p50_ms']} ms, "
        f"p99 {r['decided_p99_ms']} ms over {r['events_decided']} events"
    )
    print(
        f"  before_tool: p50 {r['before_tool_p50_ms']} ms, p99 {r['before_tool_p99_ms']} ms; "
        f"{r['within_budget']:.2%} answered within {args.budget_ms:g} ms "
        f"({r['timeouts']} failed open)"
    )
    if args.worker in ECHOES:
        print("  leaked calls: not measured (the echo decides nothing)")
    else:
        print(
            f"  leaked calls per looping run (0 = the in-process core): p50 {r['leaked_p50']}, "
            f"p99 {r['leaked_p99']}, max {r['leaked_max']} over {r['looping_runs']} runs "
            f"({r['refused_early']} refused earlier than the core would)"
        )
    lag = r.get("event_loop_delay_p99_ms")
    if r["event_age_p50_max_ms"] is not None:
        print(
            f"  events' age when the worker took them in (its {AGE_METRIC} histogram, bucket "
            f"bounds): p50 <= {r['event_age_p50_max_ms']:g} ms, p99 <= "
            f"{r['event_age_p99_max_ms']:g} ms: the gateway's send and the broker, before the "
            "worker"
        )
    for line in stage_age_lines(r.get("stage_ages", {})):
        print(line)
    print(
        f"  CPU over the measured {args.seconds:g} s: worker {r['worker_cpu_s']:.1f} s, client "
        f"process {r['client_cpu_s']} s, broker {r['broker_cpu_s']} s"
        + (f" (its event loop delay p99 {lag} ms)" if lag is not None else "")
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--clients",
        default="python,typescript",
        help="which gateway clients run the fleet, one leg each in this order: python, "
        "typescript or python,typescript (default)",
    )
    parser.add_argument(
        "--worker",
        default="loopguard",
        help="loopguard (default), echo (a bare aiokafka loop that only sends each batch's "
        "watermarks: the floor any worker design can reach here), faustecho (the same from "
        "one Faust agent built like the worker's) or several, e.g. loopguard,echo: each on "
        "its own fresh broker, in this order, then side by side",
    )
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured duration")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds not measured")
    parser.add_argument("--think-median", type=float, default=1.5, help="seconds")
    parser.add_argument("--think-sigma", type=float, default=0.8, help="lognormal shape")
    parser.add_argument("--back-to-back", type=float, default=0.2, help="share of calls")
    parser.add_argument("--looping", type=float, default=0.05, help="share of agents")
    parser.add_argument("--run-calls", type=int, default=30, help="calls per ordinary run")
    parser.add_argument("--budget-ms", type=float, default=50.0)
    parser.add_argument("--guarantee", choices=["exactly_once", "at_least_once"])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    add_broker_arg(parser)
    args = parser.parse_args()
    clients = comma_list(args.clients, CLIENTS)
    if clients is None:
        parser.error(f"--clients takes python, typescript or both, not {args.clients!r}")
    args.clients = clients
    args.workers = comma_list(args.worker, WORKERS)
    if args.workers is None:
        parser.error(f"--worker takes loopguard, echo, faustecho or several, not {args.worker!r}")
    profile = "kafka" if args.broker == "kafka" else "tansu"
    args.guarantee = args.guarantee or Settings.for_profile(profile).processing_guarantee
    return args


def run_fleet(args: argparse.Namespace, tmp: Path, config_file: Path) -> list[dict[str, Any]]:
    """One broker and one worker (``args.worker``: loopguard or an echo), the fleet once per
    client on them; a fresh broker for each worker, as tansu's fetches slow as topics grow."""
    tmp.mkdir(parents=True, exist_ok=True)
    broker = start_broker(args.broker, tmp)
    worker = None
    results: list[dict[str, Any]] = []
    web_port: int | None = free_port()  # the worker's /metrics: events' age at its intake
    try:
        ensure_topics(
            Settings.for_profile(broker.profile, broker=broker.url, partitions=args.partitions)
        )
        if args.worker in ECHOES:
            (worker,) = start_forwarder(args.worker, broker, "loopguard", args.partitions, tmp)
            web_port = None
        else:
            (worker,) = start_workers(
                broker,
                1,
                tmp,
                db_url=f"sqlite:///{tmp / 'audit.db'}",
                config_file=config_file,
                partitions=args.partitions,
                env={"LOOPGUARD_PROCESSING_GUARANTEE": args.guarantee},
                web_port=web_port,
            )
        print(
            f"fleet: {args.agents} agents ({args.looping:.0%} looping), think lognormal median "
            f"{args.think_median}s sigma {args.think_sigma}, {args.back_to_back:.0%} "
            f"back to back, budget {args.budget_ms:g} ms, {args.broker} {args.guarantee}, "
            f"{args.worker}, clients {', '.join(args.clients)}",
            flush=True,
        )
        for name in args.clients:
            # Each leg starts on a worker that has processed everything before it.
            probe = GatewayClient(broker.bootstrap, "fleet-probe", wait_budget_ms=0)
            try:
                if args.worker in ECHOES:
                    wait_until_echoing(probe, worker, "fleet-probe")
                else:
                    wait_until_processing(probe, workers=[worker])
            finally:
                probe.close()
            assert worker.process is not None
            window = WorkerWindow(worker.process.pid, web_port, broker_pids(broker))
            if name == "python":
                results.append(python_leg(broker, window, args))
            else:
                m = Measurements(measure_from=math.inf)
                extra = typescript_leg(broker, window.mark, args, m, tmp)
                results.append(summary("typescript", m, args, window, **extra))
            print(f"  {name} leg done", flush=True)
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()
    return results


def leg_args(args: argparse.Namespace, worker: str) -> argparse.Namespace:
    """``args`` for one worker's legs: the echo sends outside transactions, whatever asked."""
    guarantee = "at_least_once" if worker in ECHOES else args.guarantee
    return argparse.Namespace(**{**vars(args), "worker": worker, "guarantee": guarantee})


def print_floor(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Each client's loopguard leg beside its echo leg, when both ran."""
    by_leg = {(r["worker"], r["client"]): r for r in results}
    for client in args.clients:
        guard = by_leg.get(("loopguard", client))
        echo, faust = by_leg.get(("echo", client)), by_leg.get(("faustecho", client))
        if guard is None or (echo is None and faust is None):
            continue
        if echo is not None:
            print(
                f"{client} client against the floor: loopguard answered "
                f"{guard['within_budget']:.2%} of waits within {args.budget_ms:g} ms, the echo "
                f"{echo['within_budget']:.2%} (the most any worker gives this fleet on this "
                f"machine); events decided p50 {guard['decided_p50_ms']} against "
                f"{echo['decided_p50_ms']} ms"
            )
        else:
            print(
                f"{client} client: loopguard answered {guard['within_budget']:.2%} of waits "
                f"within {args.budget_ms:g} ms, events decided p50 {guard['decided_p50_ms']} ms"
            )
        if faust is not None:
            print(
                f"  the echo as a Faust agent: {faust['within_budget']:.2%}, events decided p50 "
                f"{faust['decided_p50_ms']} ms (Faust's share of the gap)"
            )


def main() -> int:
    args = parse_args()
    if "typescript" in args.clients:
        ensure_ts_build()
    tmp = Path(tempfile.mkdtemp(prefix="loopguard-fleet-"))
    config_file = tmp / "config.json"
    config_file.write_text(json.dumps(FLEET_CONFIG))
    legs: list[tuple[argparse.Namespace, dict[str, Any]]] = []  # each leg's args, figures
    try:
        for worker in args.workers:
            each = leg_args(args, worker)
            legs += [(each, result) for result in run_fleet(each, tmp / worker, config_file)]
    except RuntimeError as error:
        print(f"fleet benchmark failed: {error}", file=sys.stderr)
        return 1

    results = [result for _, result in legs]
    for each, result in legs:
        print_leg(result, each)
    print_floor(results, args)
    if args.json:
        print(json.dumps({"broker": args.broker, "guarantee": args.guarantee, "legs": results}))
    return 0
