"""An operator's release or abort of a run (issue 43), applied by the core like an event.

``loopguard release`` (the run page's buttons, a held call's webhook) publishes an
:class:`OperatorCommand` on the events topic under the run's key, so the worker applies it in
its place among the run's events, and replay, reading the same topic or export file, applies
it in the same place: the same decisions follow. A command is not part of the run's own
sequence (the gateway numbers those): it applies after whatever the run has processed when it
arrives, and its decision carries that seq.

A release restarts the run's loop counters (window, streaks, error streak, blocks) and opens a
window of warnings only (release_window.py); an abort stops the run as a detector's abort
would. Either is one decision on the control topic: gateways holding a blocked call
(``onBlock: "hold"``) resolve it from there, and the audit trail records it with who and why.
"""

from __future__ import annotations

from typing import Any

from streams.core.bursts import TurnCalls
from streams.core.events import ABORT_DETECTOR, RELEASE_DETECTOR, Action, Decision
from streams.core.guard import PostCompactionGuard
from streams.core.history import RunHistory
from streams.core.operator_command import ABORT, OperatorCommand
from streams.core.outcome_memory import OutcomeMemory
from streams.core.release_window import ReleaseWindow
from streams.core.run_state import ABORTED, ACTIVE, RunState
from streams.core.session_failures import FailingCalls

# How many command ids a run remembers, so a redelivered command applies once.
REMEMBERED_COMMANDS = 8


def last_stop(state: RunState) -> Decision | None:
    """The run's latest enforced block or abort among the decisions it keeps: what a release
    lifts (its rule is the label ``loopguard quality`` counts)."""
    for _seq, decisions in reversed(state.recent):
        for decision in reversed(decisions):
            stopped = decision.enforced and decision.action is not Action.WARN
            if stopped and decision.detector not in (RELEASE_DETECTOR, ABORT_DETECTOR):
                return decision
    return None


def restart_counters(state: RunState) -> None:
    """Forget the run's loop so far: its window of calls, outcome streaks, error streak,
    turn, carried failures, compaction guard and blocks (counting restarts from the next
    call); its usage and delivery counters stay."""
    fresh = RunHistory(state.history.max_size)
    fresh.next_index = state.history.next_index
    state.history = fresh
    state.outcomes = OutcomeMemory()
    state.turn = TurnCalls()
    state.failing = FailingCalls()
    state.guard = PostCompactionGuard()
    state.error_streak = 0
    state.blocks = 0
    state.own_from = 0
    state.held = None
    state.loop.reset()  # the budget rule's loop and its note's "since" too (loop_spend.py)


def apply_command(state: RunState, command: OperatorCommand, enforced: bool) -> list[Decision]:
    """Apply ``command`` to ``state``: its decision (none for a run that is over, or for a
    command the run already applied). ``enforced``: whether the agent's config enforces
    decisions (``mode: "observe"`` does not)."""
    if command.release_id in state.commands or state.status != ACTIVE:
        return []
    state.commands.append(command.release_id)
    if len(state.commands) > REMEMBERED_COMMANDS:
        del state.commands[0]
    env = command.envelope
    if env.agent_id and not state.agent_id:
        state.agent_id = env.agent_id
    stop = last_stop(state)
    who = command.released_by or "an operator"
    extra: dict[str, Any] = {
        "release_id": command.release_id,
        "released_by": command.released_by,
        "source": command.source,
        "scope": command.scope,
        "requested_at": env.event_time,
    }
    if stop is not None:
        extra.update(
            released_detector=stop.detector,
            released_action=stop.action.value,
            released_seq=stop.seq,
        )
    if command.command == ABORT:
        state.status = ABORTED
        action, detector, severity = Action.ABORT, ABORT_DETECTOR, "critical"
        reason = f"aborted by {who}: {command.reason}"
    else:
        restart_counters(state)
        window = ReleaseWindow(
            command.release_id, command.calls, command.until, command.released_by
        )
        state.release = window
        if command.calls is not None:
            extra["calls"] = command.calls
        if command.until is not None:
            extra["until"] = command.until
        action, detector, severity = Action.WARN, RELEASE_DETECTOR, "info"
        reason = f"released by {who}: {command.reason} (warnings only, {window.describe()})"
    return [
        Decision(
            run_id=state.run_id,
            agent_id=state.agent_id or env.agent_id,
            gateway_id=state.gateway_id or env.gateway_id,
            seq=state.last_seq,
            event_time=env.event_time,
            action=action,
            detector=detector,
            severity=severity,
            count=command.calls or 0,
            tool_name=stop.tool_name if stop is not None else "",
            reason=reason,
            enforced=enforced,
            extra=extra,
        )
    ]
