"""What a run's current loop adds to an event's decisions (issue 43): the budget rule's abort
(``maxLoopTokens``) and, with ``warnings: "model"``, a note for the model on each decision.

Only agents that set either follow their loops (:func:`watches_loops`), so
every other agent decides, and stores its runs, exactly as before. The run applies the two
apart (streams.core.run_state): the abort before an operator's release softens the event's
decisions (a released run draws warnings only, the budget's abort too), the notes after it
(so a softened decision is worded as the warning it became).
"""

from __future__ import annotations

from streams.core.config import LoopDetectionConfig
from streams.core.events import Action, AgentEvent, Decision, RunEnded, ToolCall
from streams.core.loop_spend import LoopSpend, loop_budget_decision
from streams.core.model_notes import WARNINGS_TO_MODEL, with_model_notes
from streams.core.usage import clean_tokens


def watches_loops(cfg: LoopDetectionConfig) -> bool:
    """Whether the agent's runs follow their current loop (``maxLoopTokens`` or ``warnings:
    "model"``)."""
    return cfg.max_loop_tokens > 0 or cfg.warnings == WARNINGS_TO_MODEL


def watch_loop(
    run_id: str,
    spend: LoopSpend,
    event: AgentEvent,
    decisions: list[Decision],
    cfg: LoopDetectionConfig,
    active: bool,
) -> list[Decision]:
    """``decisions`` (what the detectors made of ``event``), plus the budget rule's abort
    when the loop has spent more than the agent's ``maxLoopTokens`` on a call of a run still
    ``active``."""
    tokens = 0
    if isinstance(event, ToolCall | RunEnded):  # the events that carry a model turn
        tokens = clean_tokens(event.input_tokens) + clean_tokens(event.output_tokens)
    is_call = isinstance(event, ToolCall)
    env = event.envelope
    spend.observe(env.seq, env.event_time, is_call, tokens, bool(decisions), cfg.history_size)
    if (
        isinstance(event, ToolCall)
        and active
        and spend.over(cfg.max_loop_tokens)
        and not any(decision.action is Action.ABORT for decision in decisions)
    ):
        decisions = [*decisions, loop_budget_decision(run_id, event, cfg, spend)]
    return decisions


def worded(decisions: list[Decision], spend: LoopSpend, cfg: LoopDetectionConfig) -> list[Decision]:
    """``decisions``, each with its note for the model when the agent says ``warnings:
    "model"``."""
    if decisions and cfg.warnings == WARNINGS_TO_MODEL:
        return with_model_notes(decisions, spend)
    return decisions
