"""A run started with a chain id (issue 28) carries it in the envelope of every event it
publishes, as encoded on the wire; a run without one leaves the field out (null)."""

from __future__ import annotations

from typing import Any

from streams.core.events import (
    Action,
    AgentEvent,
    Decision,
    RunEnded,
    RunStarted,
    ToolCall,
    ToolResult,
)
from streams.gateway.client import GatewayClient
from streams.gateway.run import GatewayRun
from streams.gateway.verdicts import Verdict
from streams.wire.avro import decode_event, encode_event


class Wire:
    """The slice of GatewayClient a run uses, encoding each event as GatewayClient.publish
    does; ``refuse`` makes every verdict a block (the run then publishes its veto result)."""

    gateway_id = "gw-py"

    def __init__(self, refuse: Decision | None = None) -> None:
        self.sent: list[bytes] = []
        self.refuse = refuse

    def publish(self, event: AgentEvent) -> None:
        self.sent.append(encode_event(event))

    def flush(self) -> None:
        pass

    def take_verdict(self, *args: Any) -> Verdict:
        if self.refuse is not None:
            return Verdict(False, (), self.refuse, False, self.refuse.reason)
        return Verdict(True)

    def decoded(self) -> list[AgentEvent]:
        return [decode_event(data) for data in self.sent]


def drive(run: GatewayRun) -> None:
    run.before_tool("sessions_send", {"sessionKey": "agent:beta:main", "message": "hi"}, "c1")
    run.after_tool("sessions_send", {"sessionKey": "agent:beta:main"}, result={"ok": True})
    run.compaction()
    run.end()


def test_every_event_of_a_run_started_with_a_chain_id_carries_it() -> None:
    wire = Wire()
    run = GatewayClient.start_run(wire, "alpha", run_id="r1", chain_id="chain-7")  # type: ignore[arg-type]
    drive(run)
    events = wire.decoded()
    assert type(events[0]) is RunStarted and type(events[-1]) is RunEnded
    assert len(events) == 5
    assert [e.envelope.chain_id for e in events] == ["chain-7"] * 5
    assert {e.envelope.run_id for e in events} == {"r1"}


def test_a_run_without_a_chain_id_sends_none() -> None:
    for chain_id in (None, ""):
        wire = Wire()
        run = GatewayClient.start_run(wire, "alpha", chain_id=chain_id)  # type: ignore[arg-type]
        drive(run)
        assert [e.envelope.chain_id for e in wire.decoded()] == [None] * 5


def test_a_refused_call_and_its_veto_result_carry_the_chain_id_too() -> None:
    block = Decision(
        run_id="r2",
        agent_id="alpha",
        gateway_id="gw-py",
        seq=1,
        event_time=1,
        action=Action.BLOCK,
        detector="agent_cycle",
        severity="critical",
        count=5,
        tool_name="sessions_send",
        reason="loop between agents",
    )
    wire = Wire(refuse=block)
    run = GatewayRun(wire, "r2", "alpha", session_id="s1", chain_id="chain-9")
    verdict = run.before_tool("sessions_send", {"message": "hi"}, "c1")
    assert not verdict.allowed
    events = wire.decoded()
    assert [type(e) for e in events] == [ToolCall, ToolResult]
    assert [(e.envelope.session_id, e.envelope.chain_id) for e in events] == [("s1", "chain-9")] * 2
