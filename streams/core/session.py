"""Session scope (issue 17): a loop's counts survive a new run of the same session.

In OpenClaw a compaction can start a new run of the same session, and with per-run counts a
loop ran 248 calls over 14 hours. With ``scope: "session"`` a session's new run is seeded from
its previous run when it processes its first event: the call history window, the error streak,
the post-compaction guard's counts, the whole-run outcome streaks and the block count carry
over; seqs, the reorder buffer, the delivery stats and the recent decisions do not. A run
whose RunStarted names one of ``sessionFreshTriggers`` (heartbeats and scheduled cycles by
default) starts fresh, and so does one that begins more than ``sessionGapSeconds`` after the
previous run's last event (issue 44: a heartbeat whose trigger never reached loopguard, one
identical successful read per run, built a streak over 20 runs and was aborted; a
compaction's new run follows within seconds). Only the session's failing calls
(streams.core.session_failures) carry into every run, fresh or not. An outcome streak that
only repeated once in the previous run (a file every user turn reads first, a check each run
makes) is no loop either: it is not carried (:func:`keep_loop_streaks`).

Seeding happens when the run *processes* its first event (in seq order), never when an event
merely arrives, so the same events give the same decisions however they were delivered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.config import LoopDetectionConfig
from streams.core.events import AgentEvent, RunStarted
from streams.core.history import RunHistory
from streams.core.outcome_memory import OutcomeMemory


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
    failing: list[Any] | None = None  # FailingCalls.to_list (issue 44); None: none failing
    last_event_time: int = 0  # the previous run's newest event time (sessionGapSeconds)
    own_from: int = 0  # the index of the previous run's own first call (0: it started fresh)


def starts_fresh(event: AgentEvent, cfg: LoopDetectionConfig) -> bool:
    """Whether a run whose first event is ``event`` starts without its session's counts:
    always in run scope, and in session scope when a RunStarted names a fresh trigger."""
    if not cfg.session_scope:
        return True
    if isinstance(event, RunStarted):
        trigger = event.trigger
        return trigger is not None and trigger in cfg.session_fresh_triggers
    return False


def resumes_late(previous_time: int, first: AgentEvent, cfg: LoopDetectionConfig) -> bool:
    """Whether a run whose first event is ``first`` begins more than ``sessionGapSeconds``
    after its previous run's newest event (``previous_time``): a schedule or a pause, not a
    continuation, so it starts fresh like a fresh trigger."""
    gap = cfg.session_gap_ms
    return gap > 0 and previous_time > 0 and first.envelope.event_time - previous_time > gap


def keep_loop_streaks(memory: OutcomeMemory, window: RunHistory, own_from: int) -> None:
    """Of the outcome streaks a run carries over from its previous run (``window``: that
    run's window, its own calls from index ``own_from``), keep those built in that run or
    repeated in it at least twice: a success repeated once per run is a steady interval, not
    a loop, while a loop a compaction cut in two repeats within the run and goes on."""
    streaks = memory.streaks
    repeats: dict[str, int] = {}
    for record in window.records:
        streak = streaks.get(record.sig) if record.index >= own_from else None
        if streak is not None and streak.result_hash == record.result_hash:
            repeats[record.sig] = repeats.get(record.sig, 0) + 1
    for sig in [sig for sig, streak in streaks.items() if streak.first_index < own_from]:
        if repeats.get(sig, 0) < 2:
            del streaks[sig]


def wants_predecessor(
    run_id: str, session_id: str | None, latest_run: str | None, processed: int
) -> bool:
    """Whether a run with ``processed`` events behind it should be handed its session's latest
    run (``latest_run``) as the state to seed from: only before its first event, and only
    when that run is another one."""
    return processed == 0 and bool(session_id) and latest_run is not None and latest_run != run_id
