"""Replay and backtest of loops between agents (issue 28): the send calls are applied after
the per-run guard in event-time order, whatever order a source hands them over in, and a
backtest compares a candidate's agent-cycle decisions with the baseline's."""

from __future__ import annotations

import json

from streams.core.engine import LoopGuard
from streams.core.events import Action, Envelope, ToolCall, ToolResult
from streams.core.fleet import FleetConfig
from streams.replay.agent_cycles import with_agent_cycles
from streams.replay.backtest import NEWLY_BLOCKED, PairedGuard, backtest
from streams.replay.compare import compare_with_audit, replay_events

AGENTS = ("alpha", "beta", "gamma")


def triangle(rounds: int) -> list:
    """Each agent's run: send the same message to the next agent, then its result."""
    events, seqs, time = [], dict.fromkeys(AGENTS, 0), 1_000_000
    for _ in range(rounds):
        for index, agent in enumerate(AGENTS):
            target = AGENTS[(index + 1) % 3]
            args = json.dumps({"sessionKey": f"agent:{target}:main", "message": "same"})
            for kind in (ToolCall, ToolResult):
                seqs[agent] += 1
                time += 500
                env = Envelope(f"run-{agent}", agent, "gw", seqs[agent], time)
                events.append(kind(env, "sessions_send", args))
    return events


def cycles_guard(block: dict) -> object:
    return with_agent_cycles(LoopGuard(FleetConfig(block)))


def test_replay_decides_alike_whatever_order_the_runs_come_in():
    events = triangle(4)
    by_run = sorted(events, key=lambda e: e.envelope.run_id)  # one partition after the other
    block = {"agentCycles": {"warnAfter": 2, "blockAfter": 3}}
    live = replay_events(cycles_guard(block), events)
    read = replay_events(cycles_guard(block), by_run)
    decided = {run: [d.decision_id for d in r.decisions] for run, r in live.items()}
    assert decided == {run: [d.decision_id for d in r.decisions] for run, r in read.items()}
    assert all(
        [d.action for d in live[f"run-{a}"].decisions] == [Action.WARN, Action.BLOCK, Action.BLOCK]
        for a in AGENTS
    )


def test_replay_under_compat_finds_no_cycle_unless_switched_on():
    """compat: "openclaw" switches the rule off (the reference has none), in replay as in the
    worker: both read the sending agent's ``agentCycles``."""
    events, block = triangle(4), {"agentCycles": {"warnAfter": 2, "blockAfter": 3}}
    compat = replay_events(cycles_guard({**block, "compat": "openclaw"}), events)
    assert [d for r in compat.values() for d in r.decisions] == []
    on = {"compat": "openclaw", "agentCycles": {**block["agentCycles"], "enabled": True}}
    switched_on = replay_events(cycles_guard(on), events)
    assert {d.detector for r in switched_on.values() for d in r.decisions} == {"agent_cycle"}


def test_a_backtest_shows_the_runs_a_lower_block_after_would_block():
    events = triangle(4)
    candidate = cycles_guard({"agentCycles": {"warnAfter": 2, "blockAfter": 3}})
    paired = PairedGuard(candidate, cycles_guard({}))  # defaults: warn after 3, block after 5
    runs = replay_events(paired, events)
    scope = sorted(runs)
    reports = compare_with_audit(candidate, runs, scope, paired.history, requested=False)
    result = backtest(reports, paired.history)
    assert {c.run_id for c in result.of((NEWLY_BLOCKED,))} == {f"run-{a}" for a in AGENTS}
    assert result.totals("baseline")["warn"] == 6 and result.totals("baseline")["block"] == 0
