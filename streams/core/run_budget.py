"""``runBudget``: what the agent's own harness lets one run spend (issue 41), for the
saved-tokens estimate alone.

Harnesses end a run at a limit of their own (OpenHands' ``max_iterations``, a cost cap): a
loop loopguard stopped would not have gone past it, so the estimate (:mod:`streams.core.usage`)
counts no call beyond ``calls`` and no token beyond ``tokens``. On the OpenHands dev corpus
(runs capped at 50 calls) the stuck runs loopguard stopped made 225 more calls; "as long
again" alone says 625, with ``calls: 50`` it says 219 (docs/reference.md). No decision reads
it, so it stays out of ``config_version``. Per agent, merged field by field like the other
blocks; unset (the default) means no limit is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.config_block import check_block

RUN_BUDGET = "runBudget"
BUDGET_FIELDS = ("calls", "tokens")


@dataclass(frozen=True, slots=True)
class RunBudget:
    """The most tool calls and tokens one run may spend; 0: not known."""

    calls: int = 0
    tokens: int = 0


def check_run_budget(value: Any, where: str) -> None:
    """Validate a raw ``runBudget`` object: ``calls`` and ``tokens``, whole numbers >= 1."""
    check_block(value, where, BUDGET_FIELDS, ())


def resolve_run_budget(block: dict[str, Any]) -> RunBudget:
    """The resolved budget of a (merged) ``runBudget`` block."""
    return RunBudget(calls=int(block.get("calls") or 0), tokens=int(block.get("tokens") or 0))
