"""One agent run as a gateway drives it: numbers its events, sends them with the run's
envelope, carries a model turn's usage on the next event, and obeys the run's verdicts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol

from streams.core.events import (
    ABORT_DETECTOR,
    AgentEvent,
    CompactionRetry,
    Decision,
    Envelope,
    RunEnded,
    ToolCall,
    ToolResult,
)
from streams.core.operator_command import OperatorCommand
from streams.core.usage import clean_cost, clean_tokens
from streams.gateway.hold import (
    DEFAULT_ANSWER_WAIT_S,
    REFUSE,
    default_command,
    hold_settings,
    operator_answer,
)
from streams.gateway.verdicts import RunAborted, Verdict

LOOP_VETO_RESULT = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}


class RunChannel(Protocol):
    """The slice of :class:`~streams.gateway.client.GatewayClient` a run uses."""

    gateway_id: str

    def publish(self, event: AgentEvent) -> None: ...

    def flush(self) -> None: ...

    def take_verdict(
        self, run_id: str, published_seq: int = 0, tool_name: str = "", agent_id: str = ""
    ) -> Verdict: ...

    def decisions(self, run_id: str) -> list[Decision]: ...

    def wait_for(
        self, run_id: str, predicate: Callable[[list[Decision]], Any], timeout: float = 10.0
    ) -> list[Decision]: ...

    def publish_command(self, command: OperatorCommand) -> None: ...


class GatewayRun:
    """One agent run: numbers its events and applies loopguard's decisions to its cycles."""

    def __init__(
        self,
        client: RunChannel,
        run_id: str,
        agent_id: str,
        session_id: str | None = None,
        chain_id: str | None = None,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.agent_id = agent_id
        self.session_id = session_id or None
        # The conversation cascade across agents the run belongs to (issue 28): every event
        # of the run carries it, and the worker judges loops between agents per chain.
        self.chain_id = chain_id or None
        self.seq = 0
        self.events: list[AgentEvent] = []  # what this run published, in order (audits, tests)
        # Usage reported since the last event that carried it (input, output, cost or None).
        self._usage: tuple[int, int, float | None] | None = None
        # The block a call is held on now (onBlock "hold", issue 43), and how many were held.
        self.holding: Decision | None = None
        self.holds = 0

    def report_usage(
        self,
        input_tokens: int | None = 0,
        output_tokens: int | None = 0,
        cost_usd: float | None = None,
    ) -> None:
        """A model turn's usage (issue 28): it goes out with the run's next tool call or its
        end (the events that carry a turn), added to whatever else was reported meanwhile.
        Negative or non-finite values count nothing."""
        held_in, held_out, held_cost = self._usage or (0, 0, None)
        cost = clean_cost(cost_usd) if cost_usd is not None else None
        if cost is not None or held_cost is not None:
            held_cost = (held_cost or 0.0) + (cost or 0.0)
        self._usage = (
            held_in + clean_tokens(input_tokens),
            held_out + clean_tokens(output_tokens),
            held_cost,
        )

    def _take_usage(self) -> dict[str, Any]:
        usage, self._usage = self._usage, None
        if usage is None:
            return {}
        return {"input_tokens": usage[0], "output_tokens": usage[1], "cost_usd": usage[2]}

    def emit(self, kind: type, **fields: Any) -> AgentEvent:
        self.seq += 1
        envelope = Envelope(
            self.run_id,
            self.agent_id,
            self.client.gateway_id,
            self.seq,
            int(time.time() * 1000),
            self.session_id,
            self.chain_id,
        )
        event = kind(envelope=envelope, **fields)
        self.client.publish(event)
        self.events.append(event)
        return event

    def before_tool(
        self,
        tool_name: str,
        args: Any,
        tool_call_id: str | None = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost_usd: float | None = None,
        turn_id: str | None = None,
    ) -> Verdict:
        """Publish the call and say whether it may run; raises :class:`RunAborted`. The
        usage arguments: the model turn that asked for the call (see :meth:`report_usage`);
        ``turn_id`` names that turn (its message): give every parallel call of one turn the
        same id and the worker judges them as a set (issue 44); None when unknown."""
        verdict = self.client.take_verdict(self.run_id, self.seq, tool_name, self.agent_id)
        if not verdict.allowed and verdict.blocked_by is not None:
            verdict = self.hold(verdict)  # onBlock "hold" (issue 43); raises RunAborted
        args_json = json.dumps(args, ensure_ascii=False)
        if input_tokens is not None or output_tokens is not None or cost_usd is not None:
            self.report_usage(input_tokens, output_tokens, cost_usd)
        self.emit(
            ToolCall,
            tool_name=tool_name,
            args_json=args_json,
            tool_call_id=tool_call_id,
            turn_id=turn_id or None,
            **self._take_usage(),
        )
        if not verdict.allowed:
            self.after_tool(tool_name, args, result=LOOP_VETO_RESULT, tool_call_id=tool_call_id)
        return verdict

    def hold(self, verdict: Verdict) -> Verdict:
        """A blocked call whose agent holds instead of refusing (streams.gateway.hold): wait
        for an operator's release (the call goes through) or abort (RunAborted); with no
        answer in time publish the agent's holdDefault and obey the worker's answer to it.
        Any other block is refused at once."""
        block = verdict.blocked_by
        settings = hold_settings(block)
        if block is None or settings is None:
            return verdict
        known = self.client.decisions(self.run_id)
        since = next(
            (i + 1 for i, d in enumerate(known) if d.decision_id == block.decision_id),
            len(known),
        )
        self.holding, self.holds = block, self.holds + 1
        try:
            answer = self._operator_answer(since, settings.timeout_s)
            if answer is None and settings.default != REFUSE:
                gateway, session = self.client.gateway_id, self.session_id
                self.client.publish_command(default_command(block, settings, gateway, session))
                answer = self._operator_answer(since, DEFAULT_ANSWER_WAIT_S)
        finally:
            self.holding = None
        if answer is None:
            return verdict
        if answer.detector == ABORT_DETECTOR:
            raise RunAborted(answer)
        return Verdict(True, verdict.warnings, None, verdict.timed_out)

    def _operator_answer(self, since: int, timeout_s: float) -> Decision | None:
        try:
            seen = self.client.wait_for(
                self.run_id, lambda ds: operator_answer(ds, since) is not None, timeout_s
            )
        except TimeoutError:
            return None
        return operator_answer(seen, since)

    def after_tool(
        self,
        tool_name: str,
        args: Any,
        result: Any = None,
        error: str | None = None,
        tool_call_id: str | None = None,
    ) -> None:
        self.emit(
            ToolResult,
            tool_name=tool_name,
            args_json=json.dumps(args, ensure_ascii=False),
            result_json=None if result is None else json.dumps(result, ensure_ascii=False),
            error=error,
            tool_call_id=tool_call_id,
        )

    def compaction(self, trigger: str = "context_overflow") -> None:
        self.emit(CompactionRetry, trigger=trigger)

    def end(
        self,
        status: str = "completed",
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost_usd: float | None = None,
    ) -> None:
        """Publish RunEnded, with the usage not sent yet (the run's last turn)."""
        if input_tokens is not None or output_tokens is not None or cost_usd is not None:
            self.report_usage(input_tokens, output_tokens, cost_usd)
        self.emit(RunEnded, status=status, **self._take_usage())
        self.client.flush()
