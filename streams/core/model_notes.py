"""Decisions worded for the model (``warnings: "model"``, issue 43): what repeated, since when,
and what to do instead, in one note that gateways attach to the next tool result the model
sees and use as a block's or an abort's refusal text.

A model told in time often changes course (Gemini CLI's first detection is such a note); a
warning that only reaches a log changes nothing. The note travels on the decision itself
(``extra["model_note"]``), so every gateway, in any language, shows the model the same words:
the clients only read it (``streams.gateway.verdicts.model_note``, the TypeScript client's
``modelNote``). Event times only, never the worker's clock, so replay words it the same.
"""

from __future__ import annotations

import time
from dataclasses import replace

from streams.core.events import Action, Decision
from streams.core.loop_spend import LoopSpend

MODEL_NOTE = "model_note"
WARNINGS_TO_MODEL = "model"

# What to do instead, per kind of loop.
_REPEAT = (
    "Calling it again will give the same result: use the result you already have, change the "
    "arguments or the approach, or stop and say what is blocking you."
)
_FAILURE = (
    "Retrying will fail the same way: read the error and fix its cause first, or stop and "
    "report the error."
)
_CYCLE = (
    "Going round again will not change anything: decide from what you already have, or try "
    "something different."
)
_POLL = (
    "Polling again will not make it finish sooner: do something else meanwhile, or report "
    "that it is not finishing."
)
_INSTEAD = {
    "generic_repeat": _REPEAT,
    "global_circuit_breaker": _REPEAT,
    "post_compaction_guard": _REPEAT,
    "unchanged_outcome": _REPEAT,
    "burst_repeat": _REPEAT,
    "known_poll_no_progress": _POLL,
    "consecutive_errors": _FAILURE,
    "error_repeat": _FAILURE,
    "error_across_runs": _FAILURE,
    "ping_pong": _CYCLE,
    "repeated_cycle": _CYCLE,
    "agent_cycle": _CYCLE,
    "unknown_tool_repeat": "That tool does not exist: use one of the tools you have.",
    "compaction_storm": "Finish with a short answer from what you already have.",
    "loop_budget": "Finish with a short answer from what you already have.",
}

_EFFECT = {
    Action.WARN: "If you keep repeating it, loopguard will refuse the call.",
    Action.BLOCK: "loopguard refused this call: it did not run.",
    Action.ABORT: "loopguard stopped this run: no further tool calls will run.",
}


def what_repeated(decision: Decision) -> str:
    """The loop in the model's terms: what it did, how many times."""
    tool, count, detector = decision.tool_name, decision.count, decision.detector
    if detector == "known_poll_no_progress":
        return f"polled {tool} {count} times with no change in what it returned"
    if detector == "ping_pong":
        return (
            f"alternated between {tool} and {decision.paired_tool_name} {count} times "
            "with the same results"
        )
    if detector == "consecutive_errors":
        return f"made {count} tool calls in a row that all failed"
    if detector == "error_repeat":
        return f"called {tool} {count} times and it failed the same way each time"
    if detector == "error_across_runs":
        return f"seen {tool} fail the same way in {count} runs in a row"
    if detector == "unchanged_outcome":
        return (
            f"got the same result from {tool} {count} times in a row, whatever you did in between"
        )
    if detector == "repeated_cycle":
        return f"repeated the same cycle of calls, ending with {tool}, {count} times"
    if detector == "burst_repeat":
        return f"asked for the same {tool} calls {count} times in one turn"
    if detector == "unknown_tool_repeat":
        return f"called {tool}, a tool you do not have, {count} times"
    if detector == "compaction_storm":
        return f"had your context compacted {count + 1} times in a row with no progress"
    if detector == "post_compaction_guard":
        return f"called {tool} {count} times with the same result since your context was compacted"
    if detector == "agent_cycle":
        return f"passed the same message round between agents {count} times"
    if detector == "loop_budget":
        return f"spent {count} tokens repeating calls that made no progress"
    if detector == "run_aborted":
        return "kept calling tools after this run was stopped"
    return f"called {tool} with the same arguments {count} times with no progress"


def since_when(decision: Decision, spend: LoopSpend) -> str:
    """When the loop began, as a time of day: the note reaches the model with a later call's
    result (the next one it sees), so "this call" or "N calls ago" would be off by one."""
    if not spend.looping or spend.since_seq >= decision.seq:
        return f"first noticed at {_clock(decision.event_time)} UTC"
    return f"going on since {_clock(spend.since_time)} UTC"


def _clock(epoch_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(epoch_ms // 1000))


def model_note(decision: Decision, spend: LoopSpend) -> str:
    """The decision in a few sentences for the model (module doc)."""
    instead = _INSTEAD.get(decision.detector, _REPEAT)
    return (
        f"[loopguard] You have {what_repeated(decision)}, {since_when(decision, spend)}. "
        f"{instead} {_EFFECT[decision.action]}"
    )


def with_model_notes(decisions: list[Decision], spend: LoopSpend) -> list[Decision]:
    """``decisions``, each carrying its note in ``extra["model_note"]``."""
    return [
        replace(decision, extra={**decision.extra, MODEL_NOTE: model_note(decision, spend)})
        for decision in decisions
    ]


def note_of(decision: Decision) -> str:
    """A decision's note for the model; "" when its agent's warnings go to the log only."""
    note = decision.extra.get(MODEL_NOTE)
    return note if isinstance(note, str) else ""
