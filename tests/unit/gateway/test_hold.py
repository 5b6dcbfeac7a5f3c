"""The Python gateway's hold (issue 43) over a real ControlState fed control records as the
topic follower feeds them, without a broker: a held call goes through on a release, ends on
an abort, and with no answer publishes holdDefault and obeys the worker's answer to it."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from streams.core.events import ABORT_DETECTOR, RELEASE_DETECTOR, Action, Decision
from streams.core.operator_command import OperatorCommand
from streams.gateway.run import LOOP_VETO_RESULT, GatewayRun
from streams.gateway.verdicts import ControlState, RunAborted, Verdict
from streams.wire.avro import encode_decision


class Channel:
    """The slice of GatewayClient a run uses, over a real ControlState."""

    gateway_id = "gw-py"

    def __init__(self) -> None:
        self.control = ControlState(self.gateway_id, wait_budget_ms=0)
        self.published: list[Any] = []
        self.commands: list[OperatorCommand] = []
        self.on_command = lambda command: None

    def publish(self, event: Any) -> None:
        self.control.track(event.envelope.run_id)
        self.published.append(event)

    def flush(self) -> None:
        pass

    def take_verdict(self, run_id: str, seq: int = 0, tool: str = "", agent: str = "") -> Verdict:
        return self.control.take_verdict(run_id, seq, tool, agent)

    def decisions(self, run_id: str) -> list[Decision]:
        return self.control.decisions(run_id)

    def wait_for(self, run_id: str, predicate: Any, timeout: float = 10.0) -> list[Decision]:
        return self.control.wait_for(run_id, predicate, timeout)

    def publish_command(self, command: OperatorCommand) -> None:
        self.commands.append(command)
        self.on_command(command)

    def feed(self, decision: Decision) -> None:
        self.control.on_control(SimpleNamespace(value=encode_decision(decision)))


def decision(run_id: str, action: Action, detector: str, **extra: Any) -> Decision:
    return Decision(
        run_id, "agent", "gw-py", 2, 1, action, detector, "critical", 5, "read", f"{detector}!",
        extra=extra,
    )  # fmt: skip


def held(seconds: int = 300, default: str = "refuse") -> dict[str, Any]:
    return {"on_block": "hold", "hold_timeout_seconds": seconds, "hold_default": default}


def call_in_thread(run: GatewayRun) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["verdict"] = run.before_tool("read", {"path": "a"})
        except RunAborted as exc:
            outcome["aborted"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    while run.holding is None and thread.is_alive():
        thread.join(0.01)
    return thread, outcome


def test_a_held_call_goes_through_on_a_release_and_is_published_after_it() -> None:
    channel = Channel()
    run = GatewayRun(channel, "run-1", "agent")
    channel.control.track("run-1")
    channel.feed(decision("run-1", Action.BLOCK, "generic_repeat", **held()))
    thread, outcome = call_in_thread(run)
    assert run.holding is not None and not channel.published  # held: nothing sent yet
    channel.feed(decision("run-1", Action.WARN, RELEASE_DETECTOR, released_by="bob"))
    thread.join(10)
    assert outcome["verdict"].allowed and run.holds == 1 and run.holding is None
    assert [type(e).__name__ for e in channel.published] == ["ToolCall"]  # no veto


def test_an_abort_ends_a_held_call() -> None:
    channel = Channel()
    run = GatewayRun(channel, "run-2", "agent")
    channel.control.track("run-2")
    channel.feed(decision("run-2", Action.BLOCK, "generic_repeat", **held()))
    thread, outcome = call_in_thread(run)
    channel.feed(decision("run-2", Action.ABORT, ABORT_DETECTOR))
    thread.join(10)
    assert outcome["aborted"].decision.detector == ABORT_DETECTOR


@pytest.mark.parametrize("default", ["release", "abort"])
def test_with_no_answer_the_gateway_publishes_its_hold_default(default: str) -> None:
    channel = Channel()
    run = GatewayRun(channel, "run-3", "agent", session_id="sess-3")
    channel.control.track("run-3")
    channel.feed(decision("run-3", Action.BLOCK, "generic_repeat", **held(1, default)))
    answers = {
        "release": decision("run-3", Action.WARN, RELEASE_DETECTOR),
        "abort": decision("run-3", Action.ABORT, ABORT_DETECTOR),
    }
    channel.on_command = lambda command: channel.feed(answers[command.command])  # the worker
    thread, outcome = call_in_thread(run)
    thread.join(30)
    (command,) = channel.commands
    assert (command.command, command.source, command.envelope.session_id) == (
        default, "hold", "sess-3",
    )  # fmt: skip
    assert command.calls == (10 if default == "release" else None)
    assert "holdDefault " + default in command.reason
    if default == "release":
        assert outcome["verdict"].allowed
    else:
        assert outcome["aborted"].decision.detector == ABORT_DETECTOR


def test_a_block_without_hold_and_a_refusing_default_refuse_the_call() -> None:
    channel = Channel()
    run = GatewayRun(channel, "run-4", "agent")
    channel.control.track("run-4")
    channel.feed(decision("run-4", Action.BLOCK, "generic_repeat"))
    assert not run.before_tool("read", {"path": "a"}).allowed and run.holds == 0
    channel.feed(decision("run-4", Action.BLOCK, "ping_pong", **held(1, "refuse")))
    refused = run.before_tool("read", {"path": "a"})
    assert not refused.allowed and run.holds == 1 and not channel.commands
    results = [e for e in channel.published if type(e).__name__ == "ToolResult"]
    assert len(results) == 2 and all(r.result_json for r in results)
    assert LOOP_VETO_RESULT["details"]["deniedReason"] in results[0].result_json


def test_a_release_before_the_next_call_lifts_the_pending_block() -> None:
    channel = Channel()
    run = GatewayRun(channel, "run-5", "agent")
    channel.control.track("run-5")
    channel.feed(decision("run-5", Action.BLOCK, "generic_repeat"))
    channel.feed(decision("run-5", Action.WARN, RELEASE_DETECTOR))
    assert run.before_tool("read", {"path": "a"}).allowed
