"""Backtest a candidate config: what its decisions on recorded traffic would change against a
baseline (the audit trail, or the decisions another config makes on the same events).

The replay itself is :mod:`streams.replay.compare`'s (same reading, same per-run bookkeeping,
same rule for runs whose first events are outside the selection); this module only counts the
two decision lists per agent and detector and classifies each run by how it would end:
stopped (blocked or aborted) where it was not, no longer stopped, or stopped at another seq.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from streams.core.events import Action, AgentEvent, Decision
from streams.replay.compare import INCOMPLETE, NOT_FOUND, RunReport, decision_order

ACTIONS = tuple(a.value for a in Action)  # warn, block, abort: ordered by severity
STOPS = frozenset({Action.BLOCK, Action.ABORT})
# None (no decision at all) ranks below a warn.
RANK: dict[str | None, int] = {None: 0, **{a: i + 1 for i, a in enumerate(ACTIONS)}}

TRAIL, CONFIG = "audit_trail", "config"

NEWLY_BLOCKED, NEWLY_ABORTED = "newly_blocked", "newly_aborted"
NO_LONGER_BLOCKED, NO_LONGER_ABORTED = "no_longer_blocked", "no_longer_aborted"
STOPPED_EARLIER, STOPPED_LATER = "stopped_earlier", "stopped_later"
NEWLY = (NEWLY_BLOCKED, NEWLY_ABORTED)
NO_LONGER = (NO_LONGER_BLOCKED, NO_LONGER_ABORTED)
MOVED = (STOPPED_EARLIER, STOPPED_LATER)


@dataclass(frozen=True)
class Baseline:
    """What the candidate is compared with, said in the report so nobody has to guess."""

    kind: str  # TRAIL or CONFIG
    description: str  # "audit trail sqlite:///…" / "config fleet.json5"
    reason: str = ""  # why this baseline was chosen, when it was not asked for


class PairedGuard:
    """The baseline guard riding along with :func:`~streams.replay.compare.replay_events`:
    each event goes through it first, so both configs see the same events in one read of
    the source (a topic slice need not be read twice)."""

    def __init__(self, candidate: Any, baseline: Any) -> None:
        self.candidate = candidate
        self.baseline = baseline
        self.decisions: dict[str, list[Decision]] = {}

    def process(self, event: AgentEvent) -> list[Decision]:
        for decision in self.baseline.process(event):
            self.decisions.setdefault(decision.run_id, []).append(decision)
        return self.candidate.process(event)

    def finish(self) -> list[Decision]:
        """Decisions made over many runs once everything is read (agent cycles,
        streams.replay.agent_cycles): the baseline's kept, the candidate's returned."""
        for decision in self.baseline.finish() if hasattr(self.baseline, "finish") else []:
            self.decisions.setdefault(decision.run_id, []).append(decision)
        return self.candidate.finish() if hasattr(self.candidate, "finish") else []

    def history(self, run_id: str) -> list[Decision]:
        """The baseline's decisions for a run, in the shape of ``AuditStore.history``."""
        return self.decisions.get(run_id, [])


def cached(history: Callable[[str], list[Decision]]) -> Callable[[str], list[Decision]]:
    """``history`` asked once per run: the comparison and the backtest both need it, and on
    the audit trail each call is a query."""
    seen: dict[str, list[Decision]] = {}

    def lookup(run_id: str) -> list[Decision]:
        if run_id not in seen:
            seen[run_id] = history(run_id)
        return seen[run_id]

    return lookup


@dataclass(frozen=True)
class Outcome:
    """How one side treated a run: decisions per action, the worst action (where it first came
    and from which detector) and the first stop (block or abort), which may come earlier."""

    counts: dict[str, int]
    worst: str | None = None
    worst_seq: int | None = None
    worst_detector: str = ""
    stop_seq: int | None = None
    stop_detector: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.counts,
            "worst": self.worst,
            "worst_seq": self.worst_seq,
            "worst_detector": self.worst_detector or None,
            "stop_seq": self.stop_seq,
            "stop_detector": self.stop_detector or None,
        }


def outcome(decisions: Iterable[Decision]) -> Outcome:
    counts = dict.fromkeys(ACTIONS, 0)
    worst: Decision | None = None
    stop: Decision | None = None
    for d in sorted(decisions, key=decision_order):
        counts[d.action.value] += 1
        if worst is None or RANK[d.action.value] > RANK[worst.action.value]:
            worst = d
        if stop is None and d.action in STOPS:
            stop = d
    if worst is None:
        return Outcome(counts)
    return Outcome(
        counts,
        worst.action.value,
        worst.seq,
        worst.detector,
        stop.seq if stop else None,
        stop.detector if stop else "",
    )


def until_abort(decisions: list[Decision]) -> list[Decision]:
    """The decisions up to the run's first abort, inclusive: the run ends there, so what the
    core says about recorded events after it (``run_aborted`` on every later call) is not
    a loop caught, and would swamp the abort counts when a candidate aborts earlier."""
    ordered = sorted(decisions, key=decision_order)
    abort = next((d.seq for d in ordered if d.action is Action.ABORT), None)
    return ordered if abort is None else [d for d in ordered if d.seq <= abort]


def classify(baseline: Outcome, candidate: Outcome) -> str | None:
    """How the run's ending changes, or None when it would be stopped (or not) as before."""
    before, after = RANK[baseline.worst], RANK[candidate.worst]
    if after > before and candidate.worst in (Action.BLOCK, Action.ABORT):
        return NEWLY_ABORTED if candidate.worst == Action.ABORT else NEWLY_BLOCKED
    if before > after and baseline.worst in (Action.BLOCK, Action.ABORT):
        return NO_LONGER_ABORTED if baseline.worst == Action.ABORT else NO_LONGER_BLOCKED
    if (
        baseline.stop_seq is not None
        and candidate.stop_seq is not None
        and baseline.stop_seq != candidate.stop_seq
    ):
        return STOPPED_EARLIER if candidate.stop_seq < baseline.stop_seq else STOPPED_LATER
    return None


@dataclass
class RunChange:
    """One run that the candidate would end differently."""

    run_id: str
    agent_id: str
    change: str
    baseline: Outcome
    candidate: Outcome

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "change": self.change,
            "baseline": self.baseline.to_dict(),
            "candidate": self.candidate.to_dict(),
        }


@dataclass
class DetectorRow:
    """Decisions of one agent and detector, per action, on both sides."""

    agent_id: str
    detector: str
    baseline: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))
    candidate: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))

    @property
    def changed(self) -> bool:
        return self.baseline != self.candidate

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "detector": self.detector,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "delta": {a: self.candidate[a] - self.baseline[a] for a in ACTIONS},
        }


@dataclass
class BacktestResult:
    """The whole comparison: rows per agent and detector, changed runs, runs not compared."""

    rows: list[DetectorRow]
    changes: list[RunChange]
    compared: int
    skipped: list[RunReport]

    def totals(self, side: str) -> dict[str, int]:
        total = dict.fromkeys(ACTIONS, 0)
        for row in self.rows:
            for action, n in getattr(row, side).items():
                total[action] += n
        return total

    def of(self, kinds: tuple[str, ...]) -> list[RunChange]:
        return [c for c in self.changes if c.change in kinds]


def backtest(reports: list[RunReport], baseline: Callable[[str], list[Decision]]) -> BacktestResult:
    """Compare each report's replayed (candidate) decisions with ``baseline(run_id)`` limited,
    as replay limits the trail, to the seqs the replay reached, each side up to its first
    abort (:func:`until_abort`); incomplete runs and runs without events are left out (their
    state cannot be re-derived) and listed as skipped."""
    rows: dict[tuple[str, str], DetectorRow] = {}
    changes: list[RunChange] = []
    skipped: list[RunReport] = []
    compared = 0
    for report in reports:
        if report.status in (INCOMPLETE, NOT_FOUND):
            skipped.append(report)
            continue
        compared += 1
        before = until_abort([d for d in baseline(report.run_id) if d.seq <= report.last_seq])
        after = until_abort(report.decisions)
        for side, decisions in (("baseline", before), ("candidate", after)):
            for d in decisions:
                key = (d.agent_id, d.detector)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = DetectorRow(*key)
                getattr(row, side)[d.action.value] += 1
        base, cand = outcome(before), outcome(after)
        change = classify(base, cand)
        if change is not None:
            changes.append(RunChange(report.run_id, report.agent_id, change, base, cand))
    return BacktestResult([rows[k] for k in sorted(rows)], changes, compared, skipped)
