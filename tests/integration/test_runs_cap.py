"""The cap on the runs a worker holds (issue 26, item 7), on a running worker with a tiny
``LOOPGUARD_MAX_RUNS``: the expiry timer evicts ended runs first, then idle ones, never the
looping sentinel run whose abort is in force, which the worker still refuses afterwards (a
fresh gateway client sees the abort decided again for its next call), and
``loopguard_runs_evicted_total`` counts what went."""

from __future__ import annotations

import re
import time

import pytest
from services import ENABLED, IN_TIME_BUDGET_MS
from test_pipeline import drive_ping_pong
from test_web import wait_for_web
from web_client import Client

from streams.core.events import Action, ToolCall
from streams.devtools.embedded_broker import free_port
from streams.gateway.client import GatewayRun

pytestmark = pytest.mark.integration

CAP = 20
ENDED_RUNS = 10
IDLE_RUNS = 30


def metric(client: Client, name: str, labels: str = "") -> float:
    body = client.get("/metrics").body
    found = re.search(rf"^{re.escape(name + labels)} (\S+)$", body, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


def test_a_tiny_cap_evicts_ended_then_idle_runs_and_keeps_the_looping_one(
    pipeline_factory, migrated_db_url
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    port = free_port()
    worker = pipeline.start_worker(
        web_port=port, LOOPGUARD_MAX_RUNS=str(CAP), LOOPGUARD_EXPIRY_INTERVAL="1"
    )
    gateway = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    try:
        pipeline.wait_ready(gateway)
        wait_for_web(f"http://127.0.0.1:{port}")
    except Exception:
        print(pipeline.worker_logs())
        raise
    web = Client(port, None)
    # Set by the expiry timer (every second here: LOOPGUARD_EXPIRY_INTERVAL), the one that
    # evicts; a sweep may come between any two runs below, and evicts in the same order.
    wait_for(lambda: metric(web, "loopguard_runs_cap") == CAP, 30, "no loopguard_runs_cap")

    # Ended runs first (so every eviction finds them before any idle run), then the looping
    # sentinel, aborted, then idle runs: one call each, no end.
    for i in range(ENDED_RUNS):
        run = gateway.start_run("coder", run_id=f"ended-{i:02d}")
        run.before_tool("read", {"path": f"f{i}"})
        run.after_tool("read", {"path": f"f{i}"}, result={"text": "ok"})
        run.end()
    sentinel = gateway.start_run("coder", run_id="sentinel-loop")
    assert drive_ping_pong(sentinel, gateway), "the sentinel run was never aborted"
    for i in range(IDLE_RUNS):
        run = gateway.start_run("coder", run_id=f"idle-{i:02d}")
        run.before_tool("read", {"path": f"g{i}"})
    gateway.flush()
    gateway.wait_processed("idle-29", 2, timeout=60)

    # More runs than the cap: 10 ended + 30 idle + the sentinel + the readiness canary.
    evicted_idle = IDLE_RUNS + ENDED_RUNS + 2 - CAP - ENDED_RUNS
    try:
        wait_for(
            lambda: (
                metric(web, "loopguard_runs_evicted_total", '{reason="idle"}') >= evicted_idle - 1
            ),  # the canary may have ended: then it went with the ended ones
            timeout=60,
            what="the expiry timer never evicted the idle runs",
        )
    except TimeoutError:
        print(pipeline.worker_logs())
        raise
    assert metric(web, "loopguard_runs_evicted_total", '{reason="ended"}') >= ENDED_RUNS
    assert metric(web, "loopguard_runs_evicted_total", '{reason="enforced"}') == 0
    wait_for(
        lambda: metric(web, "loopguard_runs_in_table") <= CAP,
        timeout=30,
        what="the table never came down to the cap",
    )
    log = worker.log_path.read_text(errors="replace")
    assert f"at the runs cap (LOOPGUARD_MAX_RUNS={CAP}, " in log

    # The sentinel's state is still there: its next call, from its gateway restarted (a
    # client that never saw the abort; its own gateway id, as a run belongs to the gateway
    # that started it, issue 40), is refused again (an evicted run would start afresh and
    # wait for seq 1).
    fresh = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    again = GatewayRun(fresh, sentinel.run_id, sentinel.agent_id)
    again.seq = sentinel.seq
    event = again.emit(ToolCall, tool_name="exec", args_json='{"cmd": "make"}')
    fresh.flush()
    decisions = fresh.wait_for(
        sentinel.run_id,
        lambda ds: any(d.seq == event.envelope.seq for d in ds),
        timeout=60,
    )
    refused = [d for d in decisions if d.seq == event.envelope.seq]
    assert refused and refused[0].action == Action.ABORT, decisions
