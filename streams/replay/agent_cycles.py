"""Replay of loops between agents (issue 28): the per-run guard plus the agent-cycle guard.

The worker applies a cycle key's sends in the order they reach its agent-sends partition,
which follows the order they were sent in (a send is made after the one that reached its
agent). A topic is read partition by partition, so replay keeps the send calls aside and
applies them at the end in event-time order (run id and seq break ties): the same sends in
the same order give the same decisions (:mod:`streams.core.agent_cycles` is deterministic).
"""

from __future__ import annotations

from typing import Any

from streams.core.agent_cycles import AgentCycleGuard, is_send_call
from streams.core.events import AgentEvent, Decision, ToolCall


def send_order(event: ToolCall) -> tuple[int, str, int]:
    env = event.envelope
    return env.event_time, env.run_id, env.seq


class WithAgentCycles:
    """A per-run guard (``LoopGuard``) and the agent-cycle guard over the same events: what
    the worker's two agents decide. Everything else is the per-run guard's."""

    def __init__(self, guard: Any) -> None:
        self.guard = guard
        self.cycles = AgentCycleGuard(guard.config_for)
        self.sends: list[ToolCall] = []

    def process(self, event: AgentEvent) -> list[Decision]:
        if is_send_call(event):
            self.sends.append(event)  # type: ignore[arg-type]
        return self.guard.process(event)

    def finish(self) -> list[Decision]:
        """The agent-cycle decisions of every send kept so far, in send order."""
        sends, self.sends = sorted(self.sends, key=send_order), []
        return [decision for send in sends for decision in self.cycles.process(send)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.guard, name)


def with_agent_cycles(guard: Any) -> WithAgentCycles:
    return WithAgentCycles(guard)
