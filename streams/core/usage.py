"""What a run's model turns cost, and what stopping its loop saved (issues 28 and 41).

Gateways report a model turn's usage on the event it led to (a tool call, or the run's end).
A run adds it up: in total, and from its first loop decision on ("while looping"). When
loopguard stops a looping run (an enforced abort, or a run that ends after an enforced block),
it estimates the tokens that stop saved, by a stated, bounded method (docs/reference.md,
"What loops cost"):

    saved = tokens per call x calls not made
    tokens per call = the run's tokens / the calls it made, both at the stop
    calls not made = min(the calls it made,
                         its pace x the time left until SAVINGS_HORIZON_MS after its start,
                         runBudget.calls - the calls it made)         (when the config has one)
    its pace = its calls / its event-time span (at least one second)
    and saved <= runBudget.tokens - the run's tokens                    (when the config has one)

that is, a stopped loop would have gone on as long again as it had run (the median guess for
a process seen at an arbitrary point of its life), at its own pace, never past one hour from
the run's start, nor past the budget the agent's own harness gives a run (streams/core/
run_budget.py). So an estimate never exceeds what the run had spent when it was stopped, and
the fleet's total never exceeds what its stopped runs spent. Event times only, never the
worker's clock, so replay estimates the same. Pure and deterministic, like the rest of the core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# The horizon a loop left alone is assumed to run to, from the run's first event.
SAVINGS_HORIZON_MS = 3_600_000
# The method in a line, and where it is explained, for whatever shows an estimate.
SAVINGS_METHOD = (
    "the calls the run would still have made, at most as many again as it had made, at its "
    "pace, within an hour of its start and its agent's runBudget: never more than it spent"
)
SAVINGS_METHOD_DOC = 'docs/reference.md, "How the saved estimate is made"'
_MIN_SPAN_MS = 1_000


def clean_tokens(value: int | None) -> int:
    """A reported token count as added up: a missing, negative or odd value counts 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


def clean_cost(value: float | None) -> float:
    """A reported cost as added up: missing, negative or not finite counts 0."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number) and number > 0:
            return number
    return 0.0


def calls_not_made(calls: int, elapsed_ms: int, budget_calls: int = 0) -> float:
    """The calls a run stopped after ``calls`` calls and ``elapsed_ms`` of event time would
    still have made: as many again at most, at its pace, until the horizon, and never past
    the agent's own call budget (``budget_calls``; 0: none known) (module doc)."""
    remaining = SAVINGS_HORIZON_MS - elapsed_ms
    if calls <= 0 or remaining <= 0:
        return 0.0
    at_pace = calls * remaining / max(_MIN_SPAN_MS, elapsed_ms)
    most = float(min(calls, at_pace))
    if budget_calls:
        most = min(most, float(max(0, budget_calls - calls)))
    return most


@dataclass(slots=True)
class RunUsage:
    """Tokens and cost a run's events reported, the calls it made, and the part of both from
    its first loop decision on; ``saved_tokens`` once loopguard stopped it."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    loop_seq: int = 0  # seq of the event that drew the run's first decision (0: none yet)
    loop_tokens: int = 0
    loop_cost_usd: float = 0.0
    loop_calls: int = 0
    blocked: bool = False  # an enforced block seen (a run that then ends was stopped by it)
    started_at: int = 0  # event time of the run's first event
    saved_tokens: int = 0
    stopped: bool = False  # the estimate is taken (once)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def reported(self) -> bool:
        """Whether any event of the run carried usage."""
        return bool(self.input_tokens or self.output_tokens or self.cost_usd)

    def add(
        self, event_time: int, is_call: bool, tokens_in: int, tokens_out: int, cost: float
    ) -> None:
        """One event of the run (before its decisions are known: the turn that led to a
        warning was spent before the loop was seen)."""
        if not self.started_at or (event_time and event_time < self.started_at):
            self.started_at = event_time
        self.input_tokens += tokens_in
        self.output_tokens += tokens_out
        self.cost_usd += cost
        if is_call:
            self.calls += 1
        if self.loop_seq:
            self.loop_tokens += tokens_in + tokens_out
            self.loop_cost_usd += cost
            if is_call:
                self.loop_calls += 1

    def decided(self, seq: int, enforced_block: bool) -> None:
        """The event at ``seq`` drew a decision: the run is looping from here on."""
        if not self.loop_seq:
            self.loop_seq = seq
        if enforced_block:
            self.blocked = True

    def stop(self, event_time: int, budget_calls: int = 0, budget_tokens: int = 0) -> int:
        """loopguard stopped the run at ``event_time``: take the estimate (once), within the
        agent's own budget when its config names one (``runBudget``: 0, none known); returns
        the tokens it adds."""
        if self.stopped or not self.loop_seq or not self.calls:
            return 0
        self.stopped = True
        not_made = calls_not_made(self.calls, event_time - self.started_at, budget_calls)
        saved = round(self.tokens / self.calls * not_made)
        if budget_tokens:
            saved = min(saved, max(0, budget_tokens - self.tokens))
        self.saved_tokens = saved
        return self.saved_tokens

    def to_list(self) -> list[Any]:
        return [
            self.input_tokens,
            self.output_tokens,
            self.cost_usd,
            self.calls,
            self.loop_seq,
            self.loop_tokens,
            self.loop_cost_usd,
            self.loop_calls,
            self.blocked,
            self.started_at,
            self.saved_tokens,
            self.stopped,
        ]

    @classmethod
    def from_list(cls, values: list[Any]) -> RunUsage:
        """Inverse of :meth:`to_list`; a shorter list (an older writer) leaves the rest at
        their defaults. An estimate an older worker took by the unbounded method (an hour at
        the run's pace) is capped at the run's tokens, as migration 0009 caps the stored ones,
        so a run's next watermark does not bring it back; the method's own never exceed it."""
        usage = cls(*values[:12])
        usage.saved_tokens = min(usage.saved_tokens, usage.tokens)
        return usage
