"""A run's state as a Faust table value: the dict a run is written as, and the fields a
written run restores. Fields added by later issues are written only when they hold
something, so the states of runs without them read and compare as before.
"""

from __future__ import annotations

from typing import Any

from streams.core.bursts import TurnCalls
from streams.core.events import Decision, event_from_dict, event_to_dict
from streams.core.guard import PostCompactionGuard
from streams.core.held_call import HeldCall
from streams.core.history import RunHistory
from streams.core.loop_spend import LoopSpend
from streams.core.outcome_memory import OutcomeMemory
from streams.core.recent_decisions import keep_recent
from streams.core.release_window import ReleaseWindow
from streams.core.run_data import RunData, RunStats
from streams.core.session_failures import FailingCalls
from streams.core.usage import RunUsage


def run_as_dict(run: RunData, recent: list[list[Any]]) -> dict[str, Any]:
    """``run``'s fields as plain data, with ``recent`` (its recent decisions, as the caller
    wants them kept: dicts to write, objects to roll back to)."""
    data: dict[str, Any] = {
        "run_id": run.run_id,
        "agent_id": run.agent_id,
        "gateway_id": run.gateway_id,
        "last_seq": run.last_seq,
        "status": run.status,
        "blocks": run.blocks,
        "error_streak": run.error_streak,
        "last_event_time": run.last_event_time,
        "last_seq_time": run.last_seq_time,
        "waiting": [event_to_dict(run.waiting[seq]) for seq in sorted(run.waiting)],
        "history_size": run.history.max_size,
        "next_index": run.history.next_index,
        "history": run.history.to_list(),
        "guard": run.guard.to_dict(),
        "stats": [run.stats.events, run.stats.duplicates, run.stats.gaps, run.stats.late],
        "recent": recent,
    }
    if run.session_id:  # states of runs without a session read and compare as before
        data["session_id"] = run.session_id
    if run.usage.reported:  # likewise for runs whose gateway reports no usage
        data["usage"] = run.usage.to_list()
    if run.held is not None:  # likewise (issue 38)
        data["held"] = run.held.to_list()
    if run.outcomes.streaks or run.outcomes.changes:  # likewise (issue 38)
        data["outcomes"] = run.outcomes.to_list()
    if run.turn.turn_id is not None:  # likewise (issue 44): runs without turn ids
        data["turn"] = run.turn.to_list()
    if run.failing.entries:  # likewise (issue 44)
        data["failing"] = run.failing.to_list()
    if run.own_from:  # likewise (issue 44): a run seeded from its session's previous run
        data["own_from"] = run.own_from
    if run.release is not None:  # likewise (issue 43): a run an operator released
        data["release"] = run.release.to_list()
    if run.commands:  # likewise (issue 43)
        data["commands"] = list(run.commands)
    if run.loop.looping:  # likewise (issue 43): a loop under way, of an agent that watches it
        data["loop"] = run.loop.to_list()
    return data


def restore_run(run: RunData, data: dict[str, Any]) -> None:
    """Give ``run`` (built from ``data``'s scalar fields) the rest of what ``data`` holds."""
    for item in data["waiting"]:
        event = event_from_dict(item)
        run.waiting[event.envelope.seq] = event
    run.history = RunHistory.rebuild(data["history_size"], data["next_index"], data["history"])
    run.guard = PostCompactionGuard.from_dict(data["guard"])
    run.stats = RunStats(*data["stats"])
    usage = data.get("usage")  # states written before issue 28, or without usage: none
    if usage:
        run.usage = RunUsage.from_list(usage)
    held = data.get("held")  # states written before issue 38, or holding none: none
    if held:
        run.held = HeldCall.from_list(held)
    outcomes = data.get("outcomes")  # states written before issue 38: none
    if outcomes:
        run.outcomes = OutcomeMemory.from_list(outcomes)
    turn = data.get("turn")  # states written before issue 44, or without turns: none
    if turn:
        run.turn = TurnCalls.from_list(turn)
    failing = data.get("failing")  # states written before issue 44: none
    if failing:
        run.failing = FailingCalls.from_list(failing)
    run.own_from = data.get("own_from", 0)  # states written before issue 44: 0
    release = data.get("release")  # states written before issue 43, or never released: none
    if release:
        run.release = ReleaseWindow.from_list(release)
    run.commands = list(data.get("commands", []))
    loop = data.get("loop")  # states written before issue 43, or not looping: none
    if loop:
        run.loop = LoopSpend.from_list(loop)
    for seq, decisions in data.get("recent", []):
        kept = [d if isinstance(d, Decision) else Decision.from_dict(d) for d in decisions]
        keep_recent(run.recent, seq, kept)
