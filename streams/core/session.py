"""Session scope (issue 17): a loop's counts survive a new run of the same session.

In OpenClaw a compaction can start a new run of the same session, and with per-run counts a
loop ran 248 calls over 14 hours. With ``scope: "session"`` a session's new run is seeded from
its previous run when it processes its first event: the call history window, the error streak,
the post-compaction guard's counts, the whole-run outcome streaks and the block count carry
over; seqs, the reorder buffer, the delivery stats and the recent decisions do not. A run
whose RunStarted names one of ``sessionFreshTriggers`` (heartbeats and scheduled cycles by
default) starts fresh.

Seeding happens when the run *processes* its first event (in seq order), never when an event
merely arrives, so the same events give the same decisions however they were delivered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.config import LoopDetectionConfig
from streams.core.events import AgentEvent, RunStarted


@dataclass(frozen=True, slots=True)
class SessionCarry:
    """What a session's previous run hands to its next one (a copy, taken when handed)."""

    run_id: str  # the previous run
    history_size: int
    next_index: int
    history: list[list[Any]]  # RunHistory.to_list rows
    guard: dict[str, Any]  # PostCompactionGuard.to_dict
    error_streak: int
    blocks: int
    outcomes: list[Any] | None = None  # OutcomeMemory.to_list (issue 38); None: nothing yet


def starts_fresh(event: AgentEvent, cfg: LoopDetectionConfig) -> bool:
    """Whether a run whose first event is ``event`` starts without its session's counts:
    always in run scope, and in session scope when a RunStarted names a fresh trigger."""
    if not cfg.session_scope:
        return True
    if isinstance(event, RunStarted):
        trigger = event.trigger
        return trigger is not None and trigger in cfg.session_fresh_triggers
    return False


def wants_predecessor(
    run_id: str, session_id: str | None, latest_run: str | None, processed: int
) -> bool:
    """Whether a run with ``processed`` events behind it should be handed its session's latest
    run (``latest_run``) as the state to seed from: only before its first event, and only
    when that run is another one."""
    return processed == 0 and bool(session_id) and latest_run is not None and latest_run != run_id
