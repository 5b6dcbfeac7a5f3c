"""A run's current loop: where it began and what its model turns have spent since, for the
budget rule ``maxLoopTokens`` and for the model's note ("since when") (issue 43).

A loop begins at the first decision (a warning, usually) after a quiet stretch and ends once
the run has made ``historySize`` tool calls in a row without a decision: by then every call
the detectors counted has left the window, so what follows is a new loop, with its own spend.
Tokens count as :class:`streams.core.usage.RunUsage` counts a run's loop tokens: the turns
after the one whose call drew the first decision (that turn was spent before the loop was
seen). Event fields only, never the worker's clock, so replay decides the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.config import LoopDetectionConfig
from streams.core.decisions import build_decision
from streams.core.detectors import CRITICAL
from streams.core.events import Action, Decision, ToolCall

LOOP_BUDGET = "loop_budget"
LOOP_TOKENS_EXCEEDED = "loop_tokens_exceeded"


@dataclass(slots=True)
class LoopSpend:
    """The run's current loop (``since_seq`` 0: none under way)."""

    since_seq: int = 0  # seq of the event whose decision began the loop
    since_time: int = 0  # that event's time (epoch ms)
    calls: int = 0  # tool calls after it
    tokens: int = 0  # tokens of the model turns after it
    quiet: int = 0  # tool calls in a row that drew no decision

    @property
    def looping(self) -> bool:
        return self.since_seq > 0

    def observe(
        self, seq: int, event_time: int, is_call: bool, tokens: int, decided: bool, window: int
    ) -> None:
        """One processed event of the run: ``tokens`` its model turn reported, ``decided``
        whether it drew a decision, ``window`` the agent's ``historySize``."""
        if self.since_seq:
            self.tokens += tokens
            if is_call:
                self.calls += 1
        if decided:
            if not self.since_seq:
                self.since_seq, self.since_time = seq, event_time
            self.quiet = 0
        elif is_call and self.since_seq:
            self.quiet += 1
            if self.quiet >= window:  # the loop's calls have all left the window
                self.reset()

    def reset(self) -> None:
        """No loop under way (its calls left the window, or an operator released the run)."""
        self.since_seq = self.since_time = self.calls = self.tokens = self.quiet = 0

    def over(self, budget: int) -> bool:
        """Whether the loop has spent more than ``budget`` tokens (0: no budget)."""
        return budget > 0 and self.since_seq > 0 and self.tokens > budget

    def to_list(self) -> list[int]:
        return [self.since_seq, self.since_time, self.calls, self.tokens, self.quiet]

    @classmethod
    def from_list(cls, values: list[Any]) -> LoopSpend:
        return cls(*(int(value) for value in values[:5]))


def loop_budget_decision(
    run_id: str, event: ToolCall, cfg: LoopDetectionConfig, spend: LoopSpend
) -> Decision:
    """Abort: the run's current loop spent more than ``maxLoopTokens``."""
    return build_decision(
        run_id,
        event,
        cfg,
        Action.ABORT,
        detector=LOOP_BUDGET,
        severity=CRITICAL,
        count=spend.tokens,
        tool_name=event.tool_name,
        reason=(
            f"{LOOP_TOKENS_EXCEEDED}: {spend.tokens} tokens spent while looping since seq "
            f"{spend.since_seq} ({spend.calls} tool calls), over maxLoopTokens "
            f"{cfg.max_loop_tokens}; aborting the run."
        ),
        error_code=LOOP_TOKENS_EXCEEDED,
        extra={"loop_since_seq": str(spend.since_seq), "loop_calls": str(spend.calls)},
    )
