"""The budget rule on a real broker and worker (issue 43): an agent with ``maxLoopTokens``
whose gateway reports each model turn's usage is aborted by ``loop_budget`` once the turns
after its loop's first warning spend more than that, long before its thresholds would block
it; the abort reaches the gateway as RunAborted, worded for the model when the agent says
``warnings: "model"``, and the audit trail records it. The same loop without the budget is
only warned."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from services import Pipeline
from test_webhooks import wait_until

from streams.core.events import Action
from streams.core.loop_spend import LOOP_BUDGET, LOOP_TOKENS_EXCEEDED
from streams.gateway.client import RunAborted

pytestmark = pytest.mark.integration

TURN_IN, TURN_OUT = 12_000, 300  # one model turn of the looping agent
LOOSE = {
    "enabled": True,
    "historySize": 100,
    "warningThreshold": 3,
    "criticalThreshold": 60,
    "globalCircuitBreakerThreshold": 80,
}
CONFIG = {
    "tools": {"loopDetection": LOOSE},
    "agents": {
        "list": [
            {
                "id": "budgeted",
                "tools": {"loopDetection": {"maxLoopTokens": 50_000, "warnings": "model"}},
            }
        ]
    },
}


def loop(client, agent_id: str, calls: int) -> tuple[object, int, RunAborted | None]:
    """The same poll ``calls`` times, each turn's usage reported with its call."""
    run = client.start_run(agent_id=agent_id)
    args = {"action": "poll", "sessionId": "build-7"}
    made = 0
    try:
        for n in range(calls):
            verdict = run.before_tool(
                "process", args, f"c{n}", input_tokens=TURN_IN, output_tokens=TURN_OUT
            )
            made += 1
            if verdict.allowed:
                run.after_tool("process", args, result={"status": "running"}, tool_call_id=f"c{n}")
    except RunAborted as aborted:
        run.end("aborted")
        return run, made, aborted
    run.end()
    return run, made, None


def test_a_loop_over_its_token_budget_is_aborted(
    pipeline_factory: Callable[..., Pipeline], migrated_db_url: str
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG)
    pipeline.start_worker()
    client = pipeline.client(wait_budget_ms=2000)
    pipeline.wait_ready(client)

    run, made, aborted = loop(client, "budgeted", 30)
    assert aborted is not None, f"{made} calls and no abort"
    decision = aborted.decision
    assert (decision.detector, decision.error_code) == (LOOP_BUDGET, LOOP_TOKENS_EXCEEDED)
    # warned from the 4th call; the turns after it (12,300 tokens each) pass 50,000 at the
    # 5th of them, so the 9th call is the one the worker aborts and the 10th is refused
    assert decision.count == 5 * (TURN_IN + TURN_OUT)
    assert made == 9, made
    assert aborted.model_note.startswith("[loopguard] You have spent 61500 tokens")
    assert aborted.model_note.endswith(
        "loopguard stopped this run: no further tool calls will run."
    )

    wait_until(lambda: aborts(pipeline, run.run_id), "the budget's abort in the trail", pipeline)
    (recorded,) = aborts(pipeline, run.run_id)
    assert recorded.detector == LOOP_BUDGET and recorded.extra["loop_since_seq"] == "8"
    assert recorded.extra["model_note"] == aborted.model_note

    other, made, aborted = loop(client, "unbudgeted", 14)
    assert aborted is None and made == 14  # the same loop, no budget: warnings only
    client.wait_processed(other.run_id, other.seq)
    heard = client.decisions(other.run_id)

    def written() -> list:
        # the audit agent writes apart from the guard: wait for every decision the gateway heard
        with pipeline.store() as store:
            found = store.history(other.run_id)
        return found if heard and len(found) >= len(heard) else []

    wait_until(written, "the unbudgeted run's decisions in the trail", pipeline)
    decisions = written()
    assert decisions and {d.action for d in decisions} == {Action.WARN}
    assert all("model_note" not in d.extra for d in decisions)  # warnings "log": no note


def aborts(pipeline: Pipeline, run_id: str) -> list:
    with pipeline.store() as store:
        return [d for d in store.history(run_id) if d.action is Action.ABORT]
