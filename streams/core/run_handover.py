"""Session scope (streams.core.session): what a run hands its session's next run, and how
that next run takes it over on its first processed event.
"""

from __future__ import annotations

from streams.core.config import LoopDetectionConfig
from streams.core.events import AgentEvent
from streams.core.guard import PostCompactionGuard
from streams.core.history import RunHistory
from streams.core.outcome_memory import OutcomeMemory
from streams.core.run_data import RunData
from streams.core.session import SessionCarry, keep_loop_streaks, resumes_late, starts_fresh
from streams.core.session_failures import FailingCalls


def session_carry(run: RunData) -> SessionCarry:
    """A copy of what ``run``'s successor in its session carries over."""
    return SessionCarry(
        run_id=run.run_id,
        history_size=run.history.max_size,
        next_index=run.history.next_index,
        history=run.history.to_list(),
        guard=run.guard.to_dict(),
        error_streak=run.error_streak,
        blocks=run.blocks,
        outcomes=run.outcomes.to_list() if run.outcomes.streaks else None,
        failing=run.failing.to_list() if run.failing.entries else None,
        last_event_time=run.last_event_time,
        own_from=run.own_from,
    )


def take_over(
    run: RunData, carry: SessionCarry, first: AgentEvent, cfg: LoopDetectionConfig
) -> None:
    """Seed ``run`` from its session's previous run, unless it has processed events already;
    a run that starts fresh (a fresh trigger, or a late start) takes only the session's
    failing calls."""
    run.predecessor = None
    if run.stats.events:
        return
    if carry.failing is not None:
        run.failing = FailingCalls.from_list(carry.failing)
    if starts_fresh(first, cfg) or resumes_late(carry.last_event_time, first, cfg):
        return
    run.history = RunHistory.rebuild(carry.history_size, carry.next_index, carry.history)
    run.guard = PostCompactionGuard.from_dict(carry.guard)
    run.error_streak = carry.error_streak
    run.blocks = carry.blocks
    run.own_from = carry.next_index
    if carry.outcomes is not None:
        run.outcomes = OutcomeMemory.from_list(carry.outcomes)
        keep_loop_streaks(run.outcomes, run.history, carry.own_from)
