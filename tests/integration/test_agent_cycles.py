"""Loops between agents through a real worker (issue 28): three runs of three agents send the
same message round a triangle (alpha -> beta -> gamma -> alpha, OpenClaw's sessions_send with
``agent:<id>:main`` session keys); the worker warns, then blocks, every run of the cycle,
naming all three agents; each gateway refuses the run's next send (and only a send); the
audit trail holds the decisions, and replay makes the same ones from the same events."""

from __future__ import annotations

import json
import uuid

import pytest
from pipeline_replay import by_run_and_seq, replay_pipeline
from services import IN_TIME_BUDGET_MS
from test_pipeline import wait_for_audit

from streams.core.engine import LoopGuard
from streams.core.events import Action, Decision
from streams.core.fleet import fleet_from_document
from streams.gateway.client import GatewayClient, GatewayRun
from streams.replay.agent_cycles import with_agent_cycles
from streams.replay.compare import replay_events

pytestmark = pytest.mark.integration

CONFIG = {"tools": {"loopDetection": {"agentCycles": {"warnAfter": 2, "blockAfter": 3}}}}
AGENTS = ("alpha", "beta", "gamma")


def send(run: GatewayRun, client: GatewayClient, target: str, message: str) -> bool:
    """One sessions_send, obeying loopguard; waits until the worker has it (the next agent
    sends after this one, as in life). Whether it was allowed."""
    args = {"sessionKey": f"agent:{target}:main", "message": message}
    verdict = run.before_tool("sessions_send", args)
    if verdict.allowed:
        run.after_tool("sessions_send", args, result={"status": "ok", "reply": "noted"})
    client.wait_processed(run.run_id, run.seq, timeout=30)
    return verdict.allowed


def of(client: GatewayClient, run: GatewayRun, action: Action) -> list[Decision]:
    return [d for d in client.decisions(run.run_id) if d.action is action]


def test_a_triangle_of_agents_is_warned_then_blocked_in_every_run(
    pipeline_factory, migrated_db_url, capsys
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG, partitions=4)
    client = pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)
    tag = uuid.uuid4().hex[:6]
    runs = {
        agent: client.start_run(agent, run_id=f"{agent}-{tag}", session_id=f"agent:{agent}:main")
        for agent in AGENTS
    }
    published: list = []

    def go_round() -> list[bool]:
        allowed = []
        for sender, target in zip(AGENTS, [*AGENTS[1:], AGENTS[0]], strict=True):
            run = runs[sender]
            before = len(run.events)
            allowed.append(send(run, client, target, "any update on the ticket?"))
            published.extend(run.events[before:])
        return allowed

    for _ in range(2):
        assert go_round() == [True, True, True]
    for run in runs.values():  # warned after two rounds with no progress, in each run
        client.wait_for(run.run_id, lambda ds: any(d.action is Action.WARN for d in ds), 30)
    assert go_round() == [True, True, True]
    for run in runs.values():
        client.wait_for(run.run_id, lambda ds: any(d.action is Action.BLOCK for d in ds), 30)

    cycle = [*of(client, runs["alpha"], Action.WARN), *of(client, runs["alpha"], Action.BLOCK)]
    for decision in [d for run in runs.values() for d in client.decisions(run.run_id)]:
        assert decision.detector == "agent_cycle"
        assert sorted(json.loads(decision.extra["agents"])) == sorted(AGENTS)
        assert all(agent in decision.reason for agent in AGENTS)
    assert [d.action for d in cycle] == [Action.WARN, Action.BLOCK]

    # The block refuses the run's next send, not the read it makes first.
    alpha = runs["alpha"]
    assert alpha.before_tool("read", {"path": "ticket.md"}).allowed
    alpha.after_tool("read", {"path": "ticket.md"}, result={"text": "open"})
    published.extend(alpha.events[-2:])
    blocked = alpha.before_tool(
        "sessions_send", {"sessionKey": "agent:beta:main", "message": "any update on the ticket?"}
    )
    published.extend(alpha.events[-2:])
    assert not blocked.allowed and blocked.blocked_by.detector == "agent_cycle"
    for run in runs.values():
        run.end()

    # The audit trail holds them; replay makes the same decisions from the same events.
    received = {name: client.decisions(run.run_id) for name, run in runs.items()}
    recorded = []
    for name, run in runs.items():
        rows = wait_for_audit(pipeline, run.run_id, len(received[name]))
        assert len(rows) == len(received[name]) == 2
        recorded += rows
    replayed = replay_events(
        with_agent_cycles(LoopGuard(fleet_from_document(CONFIG))), reversed(published)
    )
    from_replay = [d for r in replayed.values() for d in r.decisions]
    assert by_run_and_seq(from_replay) == by_run_and_seq(recorded)
    assert by_run_and_seq(recorded) == by_run_and_seq([d for ds in received.values() for d in ds])

    # `loopguard replay` reads the events topic partition by partition (the three runs are
    # keyed apart) and still matches the audit trail in every run.
    report = replay_pipeline(pipeline, capsys)
    run_ids = {run.run_id for run in runs.values()}
    ours = {r["run_id"]: r for r in report["runs"] if r["run_id"] in run_ids}
    assert {r["status"] for r in ours.values()} == {"match"} and len(ours) == 3
    assert all(r["replayed"] == 2 for r in ours.values())
