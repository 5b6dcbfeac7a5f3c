"""Hold instead of fail (issue 43): an agent with ``onBlock: "hold"`` has its gateway hold a
blocked call, up to ``holdTimeoutSeconds``, for an operator's release or abort (the webhook
offers both), and do ``holdDefault`` ("refuse", "abort" or "release") when none comes.

Gateways do not read the worker's config, so each enforced block of such an agent carries the
three settings in ``extra``; a gateway without hold support refuses the call as before.
"""

from __future__ import annotations

from dataclasses import replace

from streams.core.config import LoopDetectionConfig
from streams.core.events import Action, Decision

HOLD = "hold"


def mark_hold(decisions: list[Decision], cfg: LoopDetectionConfig) -> list[Decision]:
    """``decisions`` with the hold settings on each enforced block, when ``cfg`` holds."""
    if cfg.on_block != HOLD or not decisions:
        return decisions
    marked: list[Decision] = []
    for decision in decisions:
        if decision.action is Action.BLOCK and decision.enforced:
            extra = dict(decision.extra)
            extra["on_block"] = HOLD
            extra["hold_timeout_seconds"] = cfg.hold_timeout_seconds
            extra["hold_default"] = cfg.hold_default
            decision = replace(decision, extra=extra)
        marked.append(decision)
    return marked
