"""The Python gateway client carries a call's turn id (issue 44) on the wire, and obeys the
verdicts a burst draws: every event goes through the Avro codec into the detector core, whose
decisions and watermarks come back through the control state as the control topic's would."""

from __future__ import annotations

from typing import Any

import pytest

from streams.core.engine import LoopGuard
from streams.core.events import AgentEvent, RunStarted, ToolCall, ToolResult
from streams.core.fleet import fleet_from_document
from streams.gateway.client import GatewayClient
from streams.gateway.run import GatewayRun
from streams.gateway.verdicts import ControlState, RunAborted, Verdict
from streams.wire.avro import (
    RunWatermark,
    decode_event,
    encode_decision,
    encode_event,
    encode_watermark,
)


class Record:
    def __init__(self, value: bytes) -> None:
        self.value = value


class GuardedWire:
    """The slice of GatewayClient a run uses, with the worker in the loop: each event is
    encoded, decoded and processed by the core at once; its decisions and the run's watermark
    reach a real ControlState as control records."""

    gateway_id = "gw-py"

    def __init__(self, block: dict[str, Any]) -> None:
        self.guard = LoopGuard(fleet_from_document({"tools": {"loopDetection": block}}))
        self.control = ControlState("gw-py", wait_budget_ms=1000)
        self.events: list[AgentEvent] = []

    def publish(self, event: AgentEvent) -> None:
        self.control.track(event.envelope.run_id)
        decoded = decode_event(encode_event(event))
        self.events.append(decoded)
        for decision in self.guard.process(decoded):
            self.control.on_control(Record(encode_decision(decision)))
        env = decoded.envelope
        mark = RunWatermark(
            run_id=env.run_id,
            agent_id=env.agent_id,
            gateway_id=env.gateway_id,
            seq=env.seq,
            event_time=env.event_time,
        )
        self.control.on_control(Record(encode_watermark(mark)))

    def flush(self) -> None:
        pass

    def take_verdict(self, *args: Any) -> Verdict:
        return self.control.take_verdict(*args)


URLS = ("https://a.example", "https://b.example", "https://c.example")


def test_every_call_of_a_turn_carries_its_id_and_nothing_else_does() -> None:
    wire = GuardedWire({"enabled": True})
    run = GatewayClient.start_run(wire, "agent-1", run_id="r1")  # type: ignore[arg-type]
    run.before_tool("read", {"path": "a"}, "c1", input_tokens=900, turn_id="msg-1")
    run.before_tool("read", {"path": "b"}, "c2", turn_id="msg-1")
    run.after_tool("read", {"path": "a"}, result={"content": "a"}, tool_call_id="c1")
    run.before_tool("read", {"path": "c"}, "c3")
    run.before_tool("read", {"path": "d"}, "c4", turn_id="")  # empty: no turn
    kinds = [(type(e).__name__, getattr(e, "turn_id", "-")) for e in wire.events]
    assert kinds == [
        ("RunStarted", "-"),
        ("ToolCall", "msg-1"),
        ("ToolCall", "msg-1"),
        ("ToolResult", "-"),
        ("ToolCall", None),
        ("ToolCall", None),
    ]
    assert [e.input_tokens for e in wire.events if isinstance(e, ToolCall)] == [
        900,
        None,
        None,
        None,
    ]


def test_a_gateway_sending_a_burst_with_its_turn_id_is_refused_then_aborted() -> None:
    wire = GuardedWire({"enabled": True})
    run = GatewayRun(wire, "r2", "agent-1")
    run.emit(RunStarted)
    verdicts: list[bool] = []
    with pytest.raises(RunAborted) as aborted:
        for n in range(127):
            url = URLS[n % 3]
            verdicts.append(
                run.before_tool("web_fetch", {"url": url}, f"c{n}", turn_id="m").allowed
            )
    assert verdicts.index(False) == 20  # the 21st call: refused, as the core's tests show
    assert len(verdicts) == 22 and verdicts[20:] == [False, False]
    assert aborted.value.decision.detector == "burst_repeat"
    vetoes = [e for e in wire.events if isinstance(e, ToolResult)]
    assert len(vetoes) == 2  # the refused calls, published with the loop veto as outcome


def test_without_turn_ids_the_same_burst_runs_through() -> None:
    wire = GuardedWire({"enabled": True})
    run = GatewayRun(wire, "r3", "agent-1")
    run.emit(RunStarted)
    verdicts = [
        run.before_tool("web_fetch", {"url": URLS[n % 3]}, f"c{n}").allowed for n in range(127)
    ]
    assert all(verdicts)
