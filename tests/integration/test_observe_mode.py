"""Shadow mode end to end (issue 17): an agent in ``mode: "observe"`` loops through a real
broker and worker; the gateway never refuses a call, logs each observe-only decision once,
and the control topic and the audit trail carry every decision with ``enforced`` false,
exactly the decisions the core makes on the events the gateway published."""

from __future__ import annotations

import logging
import time

import pytest
from services import IN_TIME_BUDGET_MS, control_topic_decisions
from test_pipeline import (
    by_key,
    drive_ping_pong,
    expected_decisions,
    wait_for_audit,
    wait_for_count,
)

from streams.core.events import Action

pytestmark = pytest.mark.integration

OBSERVE = {
    "tools": {"loopDetection": {"enabled": True}},
    "agents": {"list": [{"id": "shadow", "tools": {"loopDetection": {"mode": "observe"}}}]},
}


def drive_unrefused(run, client, cycles: int = 70) -> list[bool]:
    """Alternate two no-progress calls as an agent would, whatever loopguard thinks; returns
    whether each call was allowed (RunAborted would fail the test)."""
    same = {"details": {"status": "failed", "exitCode": 2, "aggregated": "boom"}}
    allowed = []
    for step in range(cycles):
        tool, args = ("read_file", {"path": "a.cfg"}) if step % 2 else ("exec", {"cmd": "make"})
        verdict = run.before_tool(tool, args)
        allowed.append(verdict.allowed)
        if verdict.allowed:
            run.after_tool(tool, args, result=same if tool == "exec" else {"text": "x"})
        assert not verdict.warnings and verdict.blocked_by is None
    return allowed


def test_an_observed_loop_is_never_refused_but_fully_recorded(
    pipeline_factory, migrated_db_url, caplog
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=OBSERVE)
    client = pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)
    caplog.set_level(logging.WARNING, logger="loopguard.gateway")
    run = client.start_run("shadow")
    allowed = drive_unrefused(run, client)
    run.end()
    assert all(allowed), "an observe-only decision refused a call"

    expected = expected_decisions(run.events, OBSERVE)
    actions = [d.action for d in expected]
    # What enforcement would have done: warned, blocked, then aborted (and every later call
    # answered with run_aborted), all of it observe-only.
    assert actions.index(Action.WARN) < actions.index(Action.BLOCK) < actions.index(Action.ABORT)
    assert {d.enforced for d in expected} == {False}

    received = wait_for_count(client, run.run_id, len(expected))
    assert by_key(received) == by_key(expected)
    rows = wait_for_audit(pipeline, run.run_id, len(expected))
    assert by_key(rows) == by_key(expected)
    # The run's progress says aborted (the core's state), reported as observe-only.
    deadline = time.monotonic() + 30
    while True:
        with pipeline.store() as store:
            found = [s for s in store.runs() if s.run_id == run.run_id]
        if (found and found[0].last_seq == run.seq) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    (summary,) = found
    assert (summary.last_seq, summary.status) == (run.seq, "aborted (observe only)")
    assert summary.worst_observed and summary.observed == len(expected)
    on_topic = control_topic_decisions(
        pipeline.broker.bootstrap, pipeline.settings.topics.control, {run.run_id}
    )
    assert {d.decision_id for d in on_topic} == {d.decision_id for d in expected}
    assert not any(d.enforced for d in on_topic)

    # The gateway said what it would have done, once per decision id.
    deadline = time.monotonic() + 10
    while True:
        lines = [r.getMessage() for r in caplog.records if "observe only" in r.getMessage()]
        if len(lines) >= len(expected) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(lines) == len(expected)
    for decision in expected:
        (line,) = [text for text in lines if f"decision {decision.decision_id}]" in text]
        verb = {"warn": "would warn", "block": "would block", "abort": "would abort"}
        assert verb[decision.action.value] in line

    # An agent without the override, on the same worker, is still blocked and aborted.
    enforced = client.start_run("coder")
    assert drive_ping_pong(enforced, client), "the enforced run was never aborted"
    assert all(d.enforced for d in client.decisions(enforced.run_id))
