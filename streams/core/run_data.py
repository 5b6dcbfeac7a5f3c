"""What one run holds: its position in its event stream, the detectors' memory and its
delivery counters; the state machine (run_state.py) and the modules that judge its calls
(run_calls.py), record its results (run_results.py), hand it over to the session's next run
(run_handover.py) and persist it (run_persistence.py) all work on these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.core.bursts import TurnCalls
from streams.core.events import AgentEvent, Decision
from streams.core.guard import PostCompactionGuard
from streams.core.held_call import HeldCall
from streams.core.history import RunHistory
from streams.core.loop_spend import LoopSpend
from streams.core.outcome_memory import OutcomeMemory
from streams.core.release_window import ReleaseWindow
from streams.core.session import SessionCarry
from streams.core.session_failures import FailingCalls
from streams.core.usage import RunUsage

ACTIVE, ENDED, ABORTED = "active", "ended", "aborted"


@dataclass(slots=True)
class RunStats:
    events: int = 0
    duplicates: int = 0
    gaps: int = 0
    late: int = 0  # events for a run that already ended or was aborted


@dataclass
class RunData:
    run_id: str
    history_size: int = 30
    agent_id: str = ""
    gateway_id: str = ""
    last_seq: int = 0  # highest seq processed; every seq before it processed or given up
    status: str = ACTIVE
    blocks: int = 0
    error_streak: int = 0  # failed tool outcomes in a row (failures.next_error_streak)
    last_event_time: int = 0  # newest event_time seen (run expiry)
    last_seq_time: int = 0  # event_time of the event at last_seq (run progress)
    waiting: dict[int, AgentEvent] = field(default_factory=dict)
    history: RunHistory = field(init=False)
    guard: PostCompactionGuard = field(default_factory=PostCompactionGuard)
    stats: RunStats = field(default_factory=RunStats)
    # Oldest first, at most recent_decisions.RECENT_DECISIONS (a list: an empty deque holds a
    # 64-slot block, 760 bytes, in every run that never decided anything).
    recent: list[tuple[int, list[Decision]]] = field(default_factory=list)
    session_id: str = ""  # the session the run belongs to, once an event named it
    # Tokens and cost its events reported, and while it was looping (issue 28).
    usage: RunUsage = field(default_factory=RunUsage)
    # A blocked call waiting for the run's next event to say whether it was vetoed, under
    # ``deviations.vetoIsOutcome: false`` (held_call.py).
    held: HeldCall | None = None
    # Each call's identical-outcome streak over the whole run (issue 38, progress.py).
    outcomes: OutcomeMemory = field(default_factory=OutcomeMemory)
    # The current assistant turn's calls, judged as a set (issue 44, bursts.py).
    turn: TurnCalls = field(default_factory=TurnCalls)
    # Session scope: the session's calls failing the same way run after run (issue 44,
    # session_failures.py), carried into every next run of the session.
    failing: FailingCalls = field(default_factory=FailingCalls)
    own_from: int = 0  # session scope: the index of its own first call (after a carried window)
    # An operator's release: warnings only while it lasts (issue 43, release_window.py).
    release: ReleaseWindow | None = None
    # The ids of the last operator commands applied, so a redelivered one applies once.
    commands: list[str] = field(default_factory=list)
    # The current loop's start and spend, for agents with maxLoopTokens or warnings "model"
    # (issue 43, loop_spend.py).
    loop: LoopSpend = field(default_factory=LoopSpend)
    # Session scope: the previous run of the session, to seed from on the first event
    # processed (streams.core.session); handed in by the engine, never stored.
    predecessor: SessionCarry | None = field(default=None, repr=False, compare=False)
    # The changelog bytes it was last written as or read from (the worker's encoder and
    # codec set them): the state a batch rolls a failed event back to, kept rather than
    # converted anew at each batch's first touch. Never stored itself.
    written: bytes | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.history = RunHistory(self.history_size)

    @property
    def event_count(self) -> int:
        """Events applied so far (duplicates and lost seqs not counted)."""
        return self.stats.events

    def is_duplicate(self, seq: int) -> bool:
        """Already processed (or already waiting for its turn)."""
        return seq <= self.last_seq or seq in self.waiting

    def decisions_for(self, seq: int) -> list[Decision]:
        """What processing event ``seq`` decided, while it is among the recent ones."""
        self.stats.duplicates += 1
        for decided_seq, decisions in self.recent:
            if decided_seq == seq:
                return list(decisions)
        return []
