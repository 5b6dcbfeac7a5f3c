"""What loops cost, on a real broker and worker (issue 28): a gateway reports each model turn's
usage with its tool calls; a run that loops until loopguard aborts it leaves its tokens, the
tokens it spent while looping and the estimate of what the abort saved (bounded by what it
spent, issue 41) in the audit trail;
`loopguard runs --json` shows them and /metrics counts them. A run without usage shows none."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from services import Pipeline
from test_webhooks import wait_until

from streams.cli.main import main
from streams.gateway.client import RunAborted

pytestmark = pytest.mark.integration

CONFIG = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 2,
            "criticalThreshold": 3,
            "globalCircuitBreakerThreshold": 4,
        }
    }
}
TURN_IN, TURN_OUT, TURN_COST = 12_000, 300, 0.04  # one model turn of the looping agent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def usage_row(pipeline: Pipeline, run_id: str) -> dict[str, Any] | None:
    with pipeline.store() as store:
        return store.run_usage([run_id]).get(run_id)


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else 0.0


def test_a_looping_run_leaves_its_cost_in_the_trail_the_cli_and_metrics(
    pipeline_factory: Callable[..., Pipeline],
    migrated_db_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG)
    port = free_port()
    pipeline.start_worker(web_port=port)
    client = pipeline.client(wait_budget_ms=2000)
    pipeline.wait_ready(client)

    run = client.start_run(agent_id="costly-agent")
    args = {"action": "poll", "sessionId": "build-7"}
    calls = 0
    with pytest.raises(RunAborted):
        for n in range(40):
            verdict = run.before_tool(
                "process",
                args,
                f"c{n}",
                input_tokens=TURN_IN,
                output_tokens=TURN_OUT,
                cost_usd=TURN_COST,
            )
            calls += 1
            if verdict.allowed:
                run.after_tool("process", args, result={"status": "running"}, tool_call_id=f"c{n}")
        client.wait_for(run.run_id, lambda ds: any(d.action.value == "abort" for d in ds), 60)
        run.before_tool("process", args, "after-abort")
    run.end("aborted")
    quiet = client.start_run(agent_id="plain-agent")  # a gateway that reports no usage
    quiet.before_tool("read", {"path": "a"})
    quiet.end()

    def settled() -> bool:
        row = usage_row(pipeline, run.run_id)
        return row is not None and row["saved_tokens"] > 0 and row["tool_calls"] == calls

    wait_until(settled, "the run's usage in the audit trail", pipeline)
    row = usage_row(pipeline, run.run_id)
    assert row is not None
    assert row["input_tokens"] == calls * TURN_IN
    assert row["output_tokens"] == calls * TURN_OUT
    assert abs(row["cost_usd"] - calls * TURN_COST) < 1e-6
    # from its first warning on: fewer than all of its calls, but some
    assert 0 < row["loop_calls"] < calls
    assert row["loop_tokens"] == row["loop_calls"] * (TURN_IN + TURN_OUT)
    # The bounded estimate (issue 41): a loop this fast would go on as long again, so what the
    # run spent by the abort, whole turns of it, and never more than it spent.
    assert 0 < row["saved_tokens"] <= row["input_tokens"] + row["output_tokens"]
    assert row["saved_tokens"] % (TURN_IN + TURN_OUT) == 0

    assert main(["runs", "--db", migrated_db_url, "--json", "--all"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (costly,) = [line for line in lines if line["run_id"] == run.run_id]
    assert costly["usage"]["loop_tokens"] == row["loop_tokens"]
    assert costly["usage"]["saved_tokens"] == row["saved_tokens"]
    assert main(["runs", "--db", migrated_db_url, "--all"]) == 0
    table = capsys.readouterr().out
    assert str(row["loop_tokens"]) in table and str(row["saved_tokens"]) in table
    assert "How the saved estimate is made" in table  # the method is named under the table
    assert usage_row(pipeline, quiet.run_id) is None

    loop_total = "loopguard_loop_tokens_total"
    saved_total = "loopguard_tokens_saved_estimate_total"
    wait_until(lambda: metric(port, saved_total) > 0, "/metrics to count the saving", pipeline)
    assert metric(port, loop_total) == row["loop_tokens"]
    assert metric(port, saved_total) == row["saved_tokens"]

    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/status/run?id={run.run_id}").read()
    assert f'id="saved-tokens">{row["saved_tokens"]:,}<' in page.decode()
    assert "How the saved estimate is made" in page.decode()
