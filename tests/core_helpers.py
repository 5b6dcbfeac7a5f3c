"""Builders for driving the detector core in tests: events for one run, payloads, guards.

``Run`` numbers its events (seq 1, 2, 3 … per run, ``time_step`` ms of event time apart) and,
when bound to a :class:`LoopGuard`,
feeds each event through it and keeps every decision. ``make_*`` methods only build events,
for tests that deliver them in their own order.
"""

from __future__ import annotations

import json
from typing import Any

from streams.core.engine import LoopGuard
from streams.core.events import (
    Action,
    AgentEvent,
    CompactionRetry,
    Decision,
    Envelope,
    RunEnded,
    RunStarted,
    ToolCall,
    ToolResult,
)
from streams.core.fleet import FleetConfig, fleet_from_document
from streams.wire.avro import RunWatermark

VETO = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
# Small windows and thresholds, so property tests reach every severity in a few dozen events.
SMALL_LIMITS: dict[str, Any] = {
    "enabled": True,
    "historySize": 6,
    "warningThreshold": 2,
    "criticalThreshold": 3,
    "globalCircuitBreakerThreshold": 5,
    "unknownToolThreshold": 2,
    "abortAfterBlocks": 4,
    "postCompactionGuard": {"windowSize": 2},
}


def fleet(config_doc: dict[str, Any] | None = None) -> FleetConfig:
    """A fleet config from a whole document or just a ``tools.loopDetection`` block."""
    if config_doc is None:
        return FleetConfig()
    if "tools" in config_doc or "agents" in config_doc:
        return fleet_from_document(config_doc)
    return fleet_from_document({"tools": {"loopDetection": config_doc}})


def guard(config_doc: dict[str, Any] | None = None) -> LoopGuard:
    """A fresh LoopGuard; ``config_doc`` is a config document or a loopDetection block."""
    return LoopGuard(fleet(config_doc))


def loop_guard(**block: Any) -> LoopGuard:
    """Shorthand: ``loop_guard(enabled=True, warningThreshold=2)``."""
    return guard({"tools": {"loopDetection": block}})


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


# -- result payloads ---------------------------------------------------------------------


def text_result(text: str, **details: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "details": details}


def exec_result(
    output: str = "ok",
    status: str = "completed",
    exit_code: int | None = 0,
    timed_out: bool = False,
    **volatile: Any,
) -> dict[str, Any]:
    details: dict[str, Any] = {
        "status": status,
        "exitCode": exit_code,
        "timedOut": timed_out,
        "aggregated": output,
        "durationMs": 12,
        "pid": 4242,
        "sessionId": "sess-1",
        "cwd": "/work",
    }
    details.update(volatile)
    return {"content": [{"type": "text", "text": output}], "details": details}


def poll_result(
    status: str = "running", output: str = "", exit_code: int | None = None
) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": output}],
        "details": {"status": status, "aggregated": output, "exitCode": exit_code},
    }


def sent_result(text: str = "hello", message_id: str = "m-1", **extra: Any) -> dict[str, Any]:
    details = {
        "status": "sent",
        "channel": "slack",
        "to": "#ops",
        "text": text,
        "messageId": message_id,
        "timestamp": 1_700_000_000_000,
        **extra,
    }
    return {"content": [{"type": "text", "text": "sent"}], "details": details}


# -- runs --------------------------------------------------------------------------------


class Run:
    """One run's event builder; with a guard it also processes each event it builds."""

    def __init__(
        self,
        lg: LoopGuard | None = None,
        run_id: str = "run-1",
        agent_id: str = "agent-1",
        gateway_id: str = "gw-1",
        start_seq: int = 1,
        start_time: int = 1_700_000_000_000,
        time_step: int = 1000,
        session_id: str | None = None,
    ) -> None:
        self.lg = lg
        self.session_id = session_id
        self.run_id = run_id
        self.agent_id = agent_id
        self.gateway_id = gateway_id
        self.seq = start_seq - 1
        self.start_time = start_time
        self.time_step = time_step
        self.events: list[AgentEvent] = []
        self.decisions: list[Decision] = []
        self.last_result_decisions: list[Decision] = []

    # building ---------------------------------------------------------------------------

    def envelope(self) -> Envelope:
        self.seq += 1
        return Envelope(
            run_id=self.run_id,
            agent_id=self.agent_id,
            gateway_id=self.gateway_id,
            seq=self.seq,
            event_time=self.start_time + self.time_step * self.seq,
            session_id=self.session_id,
        )

    def _keep(self, event: AgentEvent) -> AgentEvent:
        self.events.append(event)
        return event

    def make_call(
        self, tool: str, args: dict[str, Any] | None = None, call_id: str | None = None
    ) -> ToolCall:
        args_json = dumps({} if args is None else args)
        return self._keep(ToolCall(self.envelope(), tool, args_json, call_id))

    def make_result(
        self,
        tool: str,
        args: dict[str, Any] | None = None,
        result: Any = None,
        error: str | None = None,
        call_id: str | None = None,
        omit_args: bool = False,
    ) -> ToolResult:
        args_json = None if omit_args else dumps({} if args is None else args)
        result_json = None if result is None else dumps(result)
        return self._keep(ToolResult(self.envelope(), tool, args_json, result_json, error, call_id))

    def make_compaction(self, trigger: str = "context_overflow") -> CompactionRetry:
        return self._keep(CompactionRetry(self.envelope(), trigger))

    def make_start(self, trigger: str | None = None) -> RunStarted:
        return self._keep(RunStarted(self.envelope(), trigger))

    def make_end(self, status: str = "completed") -> RunEnded:
        return self._keep(RunEnded(self.envelope(), status))

    # processing -------------------------------------------------------------------------

    def feed(self, event: AgentEvent) -> list[Decision]:
        assert self.lg is not None, "this Run only builds events (no LoopGuard given)"
        out = self.lg.process(event)
        self.decisions.extend(out)
        return out

    def call(
        self, tool: str, args: dict[str, Any] | None = None, call_id: str | None = None
    ) -> list[Decision]:
        return self.feed(self.make_call(tool, args, call_id))

    def result(
        self,
        tool: str,
        args: dict[str, Any] | None = None,
        result: Any = None,
        error: str | None = None,
        call_id: str | None = None,
        omit_args: bool = False,
    ) -> list[Decision]:
        out = self.feed(self.make_result(tool, args, result, error, call_id, omit_args))
        self.last_result_decisions = out
        return out

    def cycle(
        self,
        tool: str,
        args: dict[str, Any] | None = None,
        result: Any = None,
        error: str | None = None,
        call_id: str | None = None,
    ) -> list[Decision]:
        """Call then result; returns the call's decisions (the result's go to
        ``last_result_decisions``). A BLOCK/ABORT on the call is answered like the gateway
        would: with the loop veto instead of the tool's result."""
        decided = self.call(tool, args, call_id)
        if decided and decided[-1].action is not Action.WARN:
            self.result(tool, args, VETO, call_id=call_id)
        else:
            self.result(tool, args, result, error, call_id)
        return decided

    def plain_cycle(
        self,
        tool: str,
        args: dict[str, Any] | None = None,
        result: Any = None,
        error: str | None = None,
        call_id: str | None = None,
    ) -> list[Decision]:
        """Call then the given result, whatever the call's decision was."""
        decided = self.call(tool, args, call_id)
        self.result(tool, args, result, error, call_id)
        return decided

    def veto(self, tool: str, args: dict[str, Any] | None = None, call_id: str | None = None):
        return self.result(tool, args, VETO, call_id=call_id)

    def compaction(self, trigger: str = "context_overflow") -> list[Decision]:
        return self.feed(self.make_compaction(trigger))

    def start(self, trigger: str | None = None) -> list[Decision]:
        return self.feed(self.make_start(trigger))

    def end(self, status: str = "completed") -> list[Decision]:
        return self.feed(self.make_end(status))


def final_watermark(run: Run, status: str) -> RunWatermark:
    """The watermark a worker publishes after a run's last event (for the audit's progress)."""
    last = run.events[-1].envelope
    return RunWatermark(
        run_id=run.run_id,
        agent_id=run.agent_id,
        gateway_id=run.gateway_id,
        seq=last.seq,
        event_time=last.event_time,
        status=status,
        event_count=len(run.events),
    )


def one(decisions: list[Decision]) -> Decision:
    assert len(decisions) == 1, decisions
    return decisions[0]


def summary(decisions: list[Decision]) -> list[tuple[str, str, int]]:
    """(action, detector, count) per decision: compact and readable in assertion diffs."""
    return [(d.action.value, d.detector, d.count) for d in decisions]
