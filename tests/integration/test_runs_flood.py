"""Issue 40, item 3, on the real broker: floods of fresh run ids from another gateway between a
looping run's rounds, against a tiny ``LOOPGUARD_MAX_RUNS`` and a per-gateway quota, evict
only the flooder's runs. The loop is refused and aborted at the same calls as a loop nobody
flooded, and after every sweep the table holds at most the cap.

Before the fix the sweep evicted idle runs least recently active first: a loop not yet warned
was the oldest idle run of the table once a flood arrived, so it went, and its next events
waited for seqs that never came (the report: 36 identical calls, 0 decisions).
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from services import ENABLED, IN_TIME_BUDGET_MS
from test_web import wait_for_web
from web_client import Client

from streams.core.events import ToolCall
from streams.devtools.embedded_broker import free_port
from streams.gateway.client import GatewayClient, RunAborted
from streams.gateway.run import GatewayRun

pytestmark = pytest.mark.integration

CAP = 30
QUOTA = 28  # the flooder's runs past it go first; then the cap takes from the largest holder
FLOOD = 40  # fresh run ids per flood, each more than the cap can hold with the table's runs
FLOOD_AFTER = (3, 7, 12)  # calls of the loop: twice before its first warning, once after
CALLS = 40
ARGS = {"url": "https://example.com/a"}
SWEEP_SECONDS = "1"  # LOOPGUARD_EXPIRY_INTERVAL: each flood waits for a sweep (10 s by default)
SAME = {"text": "same page"}


def metric(client: Client, name: str, labels: str = "") -> float:
    body = client.get("/metrics").body
    found = re.search(rf"^{re.escape(name + labels)} (\S+)$", body, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def evicted(web: Client) -> float:
    return sum(
        metric(web, "loopguard_runs_evicted_total", f'{{reason="{why}"}}')
        for why in ("ended", "idle", "enforced", "quota")
    )


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)
    return value


def flood(client: GatewayClient, n: int) -> None:
    """``n`` fresh runs of the flooding gateway, one call each, none ever ended."""
    for _ in range(n):
        run = GatewayRun(client, f"flood-{uuid.uuid4().hex[:12]}", "flood-bot")
        run.emit(ToolCall, tool_name="read", args_json='{"path": "x"}')
    client.flush()


def drive_loop(run, between=None) -> tuple[list[int], int | None]:
    """The same call with the same result, call after call (``between(call)`` before each):
    which calls were refused, and the call at which the run was aborted (None: never)."""
    refused = []
    for call in range(CALLS):
        if between is not None:
            between(call)
        try:
            verdict = run.before_tool("read_page", ARGS)
        except RunAborted:
            return refused, call
        if verdict.allowed:
            run.after_tool("read_page", ARGS, result=SAME)
        else:
            refused.append(call)
    return refused, None


def test_floods_of_run_ids_evict_only_the_flooders_runs(pipeline_factory, migrated_db_url) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    port = free_port()
    worker = pipeline.start_worker(
        web_port=port,
        LOOPGUARD_MAX_RUNS=str(CAP),
        LOOPGUARD_MAX_RUNS_PER_GATEWAY=str(QUOTA),
        LOOPGUARD_EXPIRY_INTERVAL=SWEEP_SECONDS,
    )
    victim = pipeline.client("gw-victim", wait_budget_ms=IN_TIME_BUDGET_MS)
    flooder = pipeline.client("gw-flood")
    try:
        pipeline.wait_ready(victim)
        wait_for_web(f"http://127.0.0.1:{port}")
    except Exception:
        print(pipeline.worker_logs())
        raise
    web = Client(port, None)
    wait_for(lambda: metric(web, "loopguard_runs_cap") == CAP, 30, "no loopguard_runs_cap")

    baseline = drive_loop(victim.start_run("support-bot"))
    refused, aborted_at = baseline
    assert refused and aborted_at is not None and aborted_at > max(FLOOD_AFTER), baseline

    def flood_and_sweep(call: int) -> None:
        if call not in FLOOD_AFTER:
            return
        before = evicted(web)
        flood(flooder, FLOOD)
        wait_for(
            lambda: evicted(web) >= before + FLOOD - CAP,
            timeout=60,
            what=f"no sweep evicted the flood before call {call}",
        )

    try:
        attacked = drive_loop(victim.start_run("support-bot"), flood_and_sweep)
    except Exception:
        print(pipeline.worker_logs())
        raise
    assert attacked == baseline

    # Every eviction was the flooder's: over its quota, or at the cap from the largest holder
    # (its idle runs); none of the victim's runs (aborted, so "enforced") went.
    assert metric(web, "loopguard_runs_evicted_total", '{reason="quota"}') > 0
    assert metric(web, "loopguard_runs_evicted_total", '{reason="enforced"}') == 0
    assert evicted(web) >= len(FLOOD_AFTER) * (FLOOD - CAP)
    wait_for(lambda: metric(web, "loopguard_runs_in_table") <= CAP, 30, "table over the cap")
    log = worker.log_path.read_text(errors="replace")
    assert f"(LOOPGUARD_MAX_RUNS={CAP}, LOOPGUARD_MAX_RUNS_PER_GATEWAY={QUOTA}): evicted" in log
