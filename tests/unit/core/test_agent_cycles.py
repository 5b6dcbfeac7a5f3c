"""Loops between agents (issue 28): the graph of sends, its cycles, and their decisions."""

from __future__ import annotations

import json

import pytest

from streams.core import agent_cycles
from streams.core.agent_cycles import (
    DETECTOR,
    ONLY_TOOL,
    AgentCycleGuard,
    CycleGraph,
    cycle_key,
    send_target,
)
from streams.core.config import resolve
from streams.core.config_error import ConfigError
from streams.core.events import Action, Envelope, ToolCall, ToolResult
from streams.core.fleet import FleetConfig

CONFIG = {"agentCycles": {"warnAfter": 2, "blockAfter": 3, "windowSeconds": 60}}
TRIANGLE = (("alpha", "beta"), ("beta", "gamma"), ("gamma", "alpha"))


def guard(block: dict | None = None) -> AgentCycleGuard:
    fleet = FleetConfig(CONFIG if block is None else block)
    return AgentCycleGuard(fleet.for_agent)


class Runs:
    """One run per agent, numbering its events; sends to ``agent:<target>:main``."""

    def __init__(self, chain: str | None = None) -> None:
        self.seqs: dict[str, int] = {}
        self.time = 1_000_000
        self.chain = chain

    def send(self, sender: str, target: str, message: str, tool: str = "sessions_send"):
        self.seqs[sender] = self.seqs.get(sender, 0) + 1
        self.time += 1000
        env = Envelope(
            f"run-{sender}", sender, "gw-1", self.seqs[sender], self.time, chain_id=self.chain
        )
        args = {"sessionKey": f"agent:{target}:main", "message": message}
        return ToolCall(env, tool, json.dumps(args))


def go_round(g: AgentCycleGuard, runs: Runs, rounds: int, message=lambda r: "same") -> list:
    out = []
    for r in range(rounds):
        for sender, target in TRIANGLE:
            out += [(r + 1, d) for d in g.process(runs.send(sender, target, message(r)))]
    return out


def test_a_triangle_with_the_same_messages_warns_then_blocks_every_run_naming_all_agents():
    found = go_round(guard(), Runs(), 4)
    warns = [d for r, d in found if d.action is Action.WARN]
    blocks = [d for r, d in found if d.action is Action.BLOCK]
    assert {d.run_id for d in warns} == {"run-alpha", "run-beta", "run-gamma"}
    assert {d.run_id for d in blocks} == {"run-alpha", "run-beta", "run-gamma"}
    assert {r for r, d in found if d.action is Action.WARN} == {2}  # warnAfter: 2 rounds
    assert {r for r, d in found if d.action is Action.BLOCK} == {3, 4}  # blockAfter: 3
    for d in warns + blocks:
        assert d.detector == DETECTOR
        assert json.loads(d.extra["agents"]) == ["gamma", "alpha", "beta"]  # from the closer
        for agent in ("alpha", "beta", "gamma"):
            assert agent in d.reason
        assert d.tool_name == "sessions_send"
    # a block refuses the run's next send, not whatever tool comes next
    assert all(json.loads(d.extra[ONLY_TOOL]) == "sessions_send" for d in blocks)
    assert all(ONLY_TOOL not in d.extra for d in warns)
    # each decision sits on its own run's newest send
    alpha = [d for d in blocks if d.run_id == "run-alpha"][0]
    assert alpha.seq == 3 and alpha.agent_id == "alpha"


def test_a_conversation_that_makes_progress_is_not_caught():
    found = go_round(guard(), Runs(), 6, message=lambda r: f"step {r}: new findings")
    assert found == []


def test_progress_starts_the_count_again():
    g, runs = guard(), Runs()
    assert [d.action for _, d in go_round(g, runs, 2)] == [Action.WARN] * 3
    assert go_round(g, runs, 1, message=lambda r: "something new") == []
    # the new message must go round warnAfter times again before a warning
    assert go_round(g, runs, 1, message=lambda r: "something new") != []


def test_a_chain_with_no_cycle_and_a_pair_ping_pong():
    g, runs = guard(), Runs()
    for _ in range(5):  # alpha -> beta -> gamma, never back
        assert g.process(runs.send("alpha", "beta", "x")) == []
        assert g.process(runs.send("beta", "gamma", "x")) == []
    found = []
    for _ in range(3):  # alpha <-> beta is a cycle of two agents
        found += g.process(runs.send("alpha", "beta", "x"))
        found += g.process(runs.send("beta", "alpha", "x"))
    assert {json.dumps(sorted(json.loads(d.extra["agents"]))) for d in found} == {
        '["alpha", "beta"]'
    }


def test_sends_older_than_the_window_are_forgotten():
    g, runs = guard(), Runs()
    assert go_round(g, runs, 1) == []
    runs.time += 61_000  # windowSeconds: 60
    assert go_round(g, runs, 1) == []  # the first round is gone: this is round one again
    assert {e.repeats for e in g.graphs["gateway:gw-1"].edges.values()} == {1}
    assert go_round(g, runs, 1) != []  # and the next one the second


def test_a_graph_keeps_its_newest_edges_and_runs_only(monkeypatch):
    monkeypatch.setattr(agent_cycles, "MAX_EDGES", 3)
    monkeypatch.setattr(agent_cycles, "MAX_RUNS", 2)
    g, runs = guard(), Runs()
    for n in range(6):
        g.process(runs.send(f"agent-{n}", "hub", "x"))
    graph = g.graphs["gateway:gw-1"]
    assert set(graph.edges) == {("agent-3", "hub"), ("agent-4", "hub"), ("agent-5", "hub")}
    assert set(graph.applied) == {"run-agent-4", "run-agent-5"}


def test_chain_ids_key_separate_graphs():
    # Two cascades on one gateway, each going round once per chain: never one cycle.
    assert cycle_key(Runs("c-1").send("alpha", "beta", "x")) == "chain:c-1"
    assert cycle_key(Runs().send("alpha", "beta", "x")) == "gateway:gw-1"
    g, one, two = guard(), Runs("c-1"), Runs("c-2")
    found = []
    for sender, target in TRIANGLE:  # alternate: c-1's and c-2's sends interleave
        found += g.process(one.send(sender, target, "same"))
        found += g.process(two.send(sender, target, "same"))
    assert found == [] and set(g.graphs) == {"chain:c-1", "chain:c-2"}
    assert go_round(g, one, 1) != []  # c-1's second round: its own cycle repeats


def test_a_chain_id_in_the_args_counts_too():
    event = Runs().send("alpha", "beta", "x")
    args = json.loads(event.args_json)
    moved = ToolCall(event.envelope, event.tool_name, json.dumps({**args, "chainId": "k"}))
    assert cycle_key(moved) == "chain:k"


def test_targets_read_as_openclaw_resolves_them():
    sessions = {"team-room": "gamma"}
    assert send_target("sessions_send", {"sessionKey": "agent:beta:main"}, {}) == "beta"
    assert send_target("sessions_send", {"sessionKey": "team-room"}, sessions) == "gamma"
    assert send_target("sessions_send", {"sessionKey": "other"}, {}) == "session:other"
    assert send_target("sessions_send", {"label": "ops", "agentId": "beta"}, {}) == "beta"
    assert send_target("sessions_send", {"label": "ops"}, {}) == "label:ops"
    assert send_target("sessions_send", {"agentId": "beta", "message": "m"}, {}) == "beta"
    assert send_target("sessions_send", {"message": "m"}, {}) == ""
    ref = "conv_" + "A" * 32
    assert send_target("conversations_turn", {"conversationRef": ref}, {}) == (
        "conversation:" + ref.lower()
    )


def test_other_events_redeliveries_and_self_sends_change_nothing():
    g, runs = guard(), Runs()
    first = runs.send("alpha", "beta", "x")
    assert g.process(first) == []
    assert g.process(ToolResult(first.envelope, "sessions_send", first.args_json)) == []
    assert g.process(ToolCall(first.envelope, "read", "{}")) == []
    before = g.graphs["gateway:gw-1"].encode()
    assert g.process(first) == [] and g.graphs["gateway:gw-1"].encode() == before
    assert g.process(runs.send("alpha", "alpha", "x")) == []


def test_off_switch_and_observe_mode():
    assert (
        go_round(guard({"agentCycles": {**CONFIG["agentCycles"], "enabled": False}}), Runs(), 4)
        == []
    )
    observed = go_round(guard({**CONFIG, "mode": "observe"}), Runs(), 3)
    assert observed and not any(d.enforced for _, d in observed)


def test_compat_openclaw_switches_the_rule_off_unless_the_block_sets_it():
    """The reference has no rule across agents: under compat a triangle goes unnoticed, as
    with OpenClaw's own detector, unless ``agentCycles.enabled`` is set (per agent too)."""
    assert go_round(guard({**CONFIG, "compat": "openclaw"}), Runs(), 4) == []
    switched_on = {"compat": "openclaw", "agentCycles": {**CONFIG["agentCycles"], "enabled": True}}
    assert {d.action for _, d in go_round(guard(switched_on), Runs(), 4)} == {
        Action.WARN,
        Action.BLOCK,
    }
    per_agent = FleetConfig({**CONFIG, "compat": "openclaw"}, {"alpha": {"compat": "loopguard"}})
    assert per_agent.for_agent("alpha").agent_cycles.enabled
    assert not per_agent.for_agent("beta").agent_cycles.enabled


def test_the_graph_survives_a_round_trip_through_its_bytes():
    g, runs = guard(), Runs()
    go_round(g, runs, 1)
    graph = g.graphs["gateway:gw-1"]
    assert CycleGraph.decode(graph.encode()).encode() == graph.encode()
    # and a guard fed from a restored graph decides as the original would
    restored = guard()
    restored.graphs["gateway:gw-1"] = CycleGraph.decode(graph.encode())
    assert go_round(restored, runs, 1)[0][1].action is Action.WARN


def test_config_block_checks_and_keeps_the_default_version():
    assert resolve({}).version == "3820b3802a3991bc"
    assert resolve({"agentCycles": {"warnAfter": 3}}).version == "3820b3802a3991bc"
    assert resolve({"agentCycles": {"warnAfter": 4}}).version != "3820b3802a3991bc"
    assert resolve({"agentCycles": {"warnAfter": 6, "blockAfter": 2}}).agent_cycles.block_after == 7
    with pytest.raises(ConfigError, match="agentCycles.warnAfer"):
        resolve({"agentCycles": {"warnAfer": 2}})
    with pytest.raises(ConfigError, match="whole number"):
        resolve({"agentCycles": {"windowSeconds": 0}})
