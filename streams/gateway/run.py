"""One agent run as a gateway drives it: numbers its events, sends them with the run's
envelope, carries a model turn's usage on the next event, and obeys the run's verdicts."""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from streams.core.events import (
    AgentEvent,
    CompactionRetry,
    Envelope,
    RunEnded,
    ToolCall,
    ToolResult,
)
from streams.core.usage import clean_cost, clean_tokens
from streams.gateway.verdicts import Verdict

LOOP_VETO_RESULT = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}


class RunChannel(Protocol):
    """The slice of :class:`~streams.gateway.client.GatewayClient` a run uses."""

    gateway_id: str

    def publish(self, event: AgentEvent) -> None: ...

    def flush(self) -> None: ...

    def take_verdict(
        self, run_id: str, published_seq: int = 0, tool_name: str = "", agent_id: str = ""
    ) -> Verdict: ...


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
