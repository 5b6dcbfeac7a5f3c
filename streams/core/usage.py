"""What a run's model turns cost, and what stopping its loop saved (issue 28).

Gateways report a model turn's usage on the event it led to (a tool call, or the run's end).
A run adds it up: in total, and from its first loop decision on ("while looping"). When
loopguard stops a looping run (an enforced abort, or a run that ends after an enforced block),
it estimates the tokens that stop saved:

    saved = tokens per call x calls not made
    tokens per call = the run's tokens / the calls it made
    calls not made = the run's call rate (its calls over its event-time span, at least one
                     second) x the rest of SAVINGS_HORIZON_MS after its start

that is, a loop left alone goes on at the pace it had until the horizon (one hour from the
run's start: openclaw#16808 looped for two). Event times only, never the worker's clock, so
replay estimates the same. Pure and deterministic, like the rest of the core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# The horizon a loop left alone is assumed to run to, from the run's first event.
SAVINGS_HORIZON_MS = 3_600_000
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

    def stop(self, event_time: int) -> int:
        """loopguard stopped the run at ``event_time``: take the estimate (once); returns the
        tokens it adds."""
        if self.stopped or not self.loop_seq or not self.calls:
            return 0
        self.stopped = True
        span = max(_MIN_SPAN_MS, event_time - self.started_at)
        remaining = SAVINGS_HORIZON_MS - (event_time - self.started_at)
        if remaining <= 0:
            return 0
        calls_not_made = self.calls * remaining / span
        self.saved_tokens = round(self.tokens / self.calls * calls_not_made)
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
        their defaults."""
        return cls(*values[:12])
