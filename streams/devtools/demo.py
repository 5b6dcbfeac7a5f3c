"""``loopguard demo``: the embedded default end to end, with a gateway that gets caught looping.

Starts the tansu broker (memory storage), a SQLite audit trail, one worker, then plays three
agent runs through the gateway client: normal work, a ping-pong loop (warned, blocked, then
aborted) and a loop that survives a context-overflow compaction (aborted with
``compaction_loop_persisted``). Decisions are printed as they arrive.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from streams.audit.store import AuditStore, migrate
from streams.core.events import Decision
from streams.devtools.embedded_broker import EmbeddedBroker
from streams.devtools.worker_process import WorkerProcess, wait_until_processing
from streams.gateway.client import GatewayClient, GatewayRun, RunAborted
from streams.kafka.topics import ensure_topics
from streams.settings import Settings

DATA = Path("loopguard-data")
DEMO_CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
THINK_TIME = 0.03  # seconds an agent "thinks" between tool cycles


def _print_decision(decision: Decision) -> None:
    if decision.agent_id == "loopguard-canary":
        return
    print(
        f"  <- {decision.action.value.upper():<5} run={decision.run_id:<12} seq={decision.seq:<3} "
        f"{decision.detector} (count {decision.count}): {decision.reason[:90]}",
        flush=True,
    )


def _cycle(run: GatewayRun, tool: str, args: dict, result: dict) -> bool:
    """One tool cycle as a gateway runs it; False when loopguard blocked the call."""
    time.sleep(THINK_TIME)
    verdict = run.before_tool(tool, args)
    if verdict.allowed:
        run.after_tool(tool, args, result=result)
    else:
        print(f"  !! gateway refused {tool} in run {run.run_id}: blocked by loopguard", flush=True)
    return verdict.allowed


def normal_run(client: GatewayClient) -> str:
    run = client.start_run("coder", run_id="normal-1")
    print("\n== run normal-1: ordinary work (no loop) ==", flush=True)
    for step in range(8):
        _cycle(run, "read_file", {"path": f"src/module_{step}.py"}, {"text": f"code {step}"})
    _cycle(run, "exec", {"command": "pytest"}, {"details": {"status": "completed", "exitCode": 0}})
    run.end()
    return run.run_id


def ping_pong_run(client: GatewayClient) -> str:
    run = client.start_run("coder", run_id="pingpong-1")
    print("\n== run pingpong-1: agent alternates two calls that make no progress ==", flush=True)
    build_failed = {
        "details": {
            "status": "failed",
            "exitCode": 2,
            "aggregated": "error: missing config key 'db'",
            "durationMs": 1234,
        }
    }
    try:
        for step in range(60):
            if step % 2 == 0:
                _cycle(run, "read_file", {"path": "config.yaml"}, {"text": "db: null"})
            else:
                _cycle(run, "exec", {"command": "make build"}, build_failed)
        run.end()
    except RunAborted as aborted:
        print(f"  xx gateway stopped run {run.run_id}: {aborted}", flush=True)
    return run.run_id


def compaction_run(client: GatewayClient) -> str:
    run = client.start_run("researcher", run_id="compact-1")
    print("\n== run compact-1: context overflow, compaction, same loop again ==", flush=True)
    try:
        for step in range(3):
            _cycle(run, "web_search", {"q": f"topic {step}"}, {"text": f"results {step}"})
        print("  -- context overflow: runner compacts and retries", flush=True)
        run.compaction("context_overflow")
        for _ in range(5):
            _cycle(run, "web_fetch", {"url": "https://example.invalid/a"}, {"error": "timeout"})
        run.end()
    except RunAborted as aborted:
        print(f"  xx gateway stopped run {run.run_id}: {aborted}", flush=True)
    return run.run_id


def _wait_for_audit(db_url: str, expected: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    with AuditStore(db_url) as store:
        while True:
            count = store.decision_count()
            if count >= expected or time.monotonic() > deadline:
                return count
            time.sleep(0.2)


def run_demo(db_url: str, keep_running: bool = False) -> int:
    DATA.mkdir(exist_ok=True)
    config_path = DATA / "demo-config.json"
    config_path.write_text(json.dumps(DEMO_CONFIG, indent=2))
    print("loopguard demo: tansu broker + SQLite audit trail + 1 worker + demo gateway", flush=True)
    broker = EmbeddedBroker(log_path=DATA / "tansu.log").start()
    print(f"  broker   {broker.url} (tansu, memory storage)", flush=True)
    migrate(db_url)
    print(f"  audit    {db_url}", flush=True)
    settings = Settings.for_profile("tansu", broker=broker.url, partitions=4)
    ensure_topics(settings)
    worker = WorkerProcess(
        broker.url,
        db_url,
        profile="tansu",
        log_path=DATA / "worker.log",
        config_file=str(config_path),
        partitions=4,
        env={"LOOPGUARD_SESSION_TIMEOUT": "2", "LOOPGUARD_HEARTBEAT_INTERVAL": "0.5"},
    ).start()
    print(f"  worker   pid {worker.process.pid}, log {DATA / 'worker.log'}", flush=True)
    client = GatewayClient(broker.bootstrap, gateway_id="demo-gw", on_decision=_print_decision)
    try:
        started = time.monotonic()
        print("  waiting for the worker to join and process a canary run ...", flush=True)
        wait_until_processing(client, workers=[worker])
        print(f"  ready after {time.monotonic() - started:.1f}s", flush=True)
        run_ids = [normal_run(client), ping_pong_run(client), compaction_run(client)]
        time.sleep(0.5)  # let the last decisions reach the console
        received = [d for rid in run_ids for d in client.decisions(rid)]
        audited = _wait_for_audit(db_url, len(received) + 1)
        counts = Counter(d.action.value for d in received)
        print("\n== summary ==")
        for rid in run_ids:
            actions = Counter(d.action.value for d in client.decisions(rid))
            print(f"  {rid:<12} {dict(actions) or 'no decisions'}")
        print(f"  decisions received by the gateway: {len(received)} {dict(counts)}")
        print(f"  rows in the audit trail (incl. canary): {audited}")
        print("  query it:  loopguard history pingpong-1   |   loopguard runs")
        if keep_running:
            print(f"services left running: broker {broker.url}, worker pid {worker.process.pid}")
            return 0
        return 0 if counts.get("abort", 0) >= 2 else 1
    finally:
        client.close()
        if not keep_running:
            worker.stop()
            broker.stop()
