"""What operators said about loopguard's stops, read back from the audit trail as labels
(issue 43): a run an operator released was a false stop of the rule whose stop was lifted, a
run an operator aborted a true loop. ``loopguard quality`` counts them per rule and agent;
``loopguard backtest`` and ``bench/quality_bench.py`` score configs on them.

Stops come from the decisions table (a rule stopped a run when it made an enforced block or
abort of it), the operators' words from ``operator_releases`` (one row per run a release or
an abort reached). Operator decisions themselves (detectors ``operator_*``) are no stop, nor
``run_aborted`` (an abort repeated for the calls after it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from streams.audit.models import DecisionRow, OperatorReleaseRow
from streams.audit.store import AuditStore

RELEASE, ABORT = "release", "abort"  # operator_releases.command
OPERATOR_PREFIX = "operator_"  # the detectors of operators' own decisions
RUN_ABORTED = "run_aborted"  # an abort repeated for a call after it: no rule of its own
NO_RULE = "(no stop)"  # an operator abort of a run no rule had stopped


@dataclass(frozen=True)
class RunLabel:
    """An operator's verdict on one run: ``stuck`` true for an abort, false for a release
    (the last command wins); ``rule`` the stop it concerns; ``why`` who said it and why."""

    run_id: str
    agent_id: str
    stuck: bool
    rule: str
    why: str
    at_seq: int


@dataclass
class RuleCounts:
    """One rule's (or one agent's under a rule) stops and what operators did about them."""

    stops: int = 0  # runs the rule stopped (an enforced block or abort)
    releases: int = 0  # of them, runs an operator released
    aborts: int = 0  # runs an operator aborted while (or after) the rule warned or stopped

    @property
    def release_rate(self) -> float | None:
        return self.releases / self.stops if self.stops else None

    def to_dict(self) -> dict[str, Any]:
        rate = self.release_rate
        return {
            "stops": self.stops,
            "releases": self.releases,
            "operator_aborts": self.aborts,
            "release_rate": None if rate is None else round(rate, 4),
        }


@dataclass
class TrailQuality:
    """Per rule, and per rule and agent, the stops and the operators' labels."""

    rules: dict[str, RuleCounts] = field(default_factory=dict)
    agents: dict[tuple[str, str], RuleCounts] = field(default_factory=dict)
    labels: dict[str, RunLabel] = field(default_factory=dict)

    def add(self, rule: str, agent: str, what: str) -> None:
        for counts in (
            self.rules.setdefault(rule, RuleCounts()),
            self.agents.setdefault((rule, agent), RuleCounts()),
        ):
            setattr(counts, what, getattr(counts, what) + 1)


def is_rule(detector: str) -> bool:
    """Whether a decision's detector is a rule (not an operator's, nor a repeated abort)."""
    return detector != RUN_ABORTED and not detector.startswith(OPERATOR_PREFIX)


def run_stops(store: AuditStore) -> dict[str, list[tuple[int, str, str]]]:
    """Run id -> its enforced blocks and aborts as (seq, rule, agent), in seq order."""
    query = (
        select(DecisionRow.run_id, DecisionRow.seq, DecisionRow.detector, DecisionRow.agent_id)
        .where(DecisionRow.enforced.is_(True), DecisionRow.action.in_(("block", "abort")))
        .order_by(DecisionRow.run_id, DecisionRow.seq)
    )
    found: dict[str, list[tuple[int, str, str]]] = {}
    with Session(store.engine) as session:
        for run_id, seq, detector, agent in session.execute(query):
            if is_rule(detector):
                found.setdefault(run_id, []).append((seq, detector, agent))
    return found


def last_rules(store: AuditStore, run_ids: list[str]) -> dict[str, str]:
    """Run id -> the rule of its last detector decision (any action), for an operator abort
    that names no stop."""
    if not run_ids:
        return {}
    query = (
        select(DecisionRow.run_id, DecisionRow.detector)
        .where(DecisionRow.run_id.in_(run_ids))
        .order_by(DecisionRow.run_id, DecisionRow.seq)
    )
    rules: dict[str, str] = {}
    with Session(store.engine) as session:
        for run_id, detector in session.execute(query):
            if is_rule(detector):
                rules[run_id] = detector
    return rules


def operator_commands(store: AuditStore) -> list[OperatorReleaseRow]:
    """Every release and abort, oldest first."""
    query = select(OperatorReleaseRow).order_by(
        OperatorReleaseRow.requested_at, OperatorReleaseRow.id
    )
    with Session(store.engine) as session:
        rows = list(session.scalars(query))
        session.expunge_all()
    return rows


def trail_quality(store: AuditStore, agent: str | None = None) -> TrailQuality:
    """Stops per rule and agent, the releases and aborts of them, and each labelled run's
    label (the run's last operator command), for ``agent`` alone when given."""
    quality = TrailQuality()
    stops = run_stops(store)
    stopped_by: dict[str, set[str]] = {}
    for run_id, decided in stops.items():
        for _seq, rule, run_agent in decided:
            if agent is not None and run_agent != agent:
                continue
            if rule not in stopped_by.setdefault(run_id, set()):
                stopped_by[run_id].add(rule)
                quality.add(rule, run_agent, "stops")
    commands = [row for row in operator_commands(store) if agent is None or row.agent_id == agent]
    unnamed = [row.run_id for row in commands if not row.released_detector]
    fallback = last_rules(store, sorted(set(unnamed)))
    counted: set[tuple[str, str, str]] = set()
    for row in commands:
        rule = row.released_detector or fallback.get(row.run_id, NO_RULE)
        if (row.run_id, rule, row.command) not in counted:
            counted.add((row.run_id, rule, row.command))
            quality.add(rule, row.agent_id, "releases" if row.command == RELEASE else "aborts")
        verb = "aborted" if row.command == ABORT else "released"
        by = f" by {row.released_by}" if row.released_by else ""
        said = f": {row.reason}" if row.reason else ""
        why = row.reason if row.reason.startswith(verb) else f"{verb}{by}{said}"
        quality.labels[row.run_id] = RunLabel(
            run_id=row.run_id,
            agent_id=row.agent_id,
            stuck=row.command == ABORT,
            rule=rule,
            why=why,
            at_seq=row.applied_seq,
        )
    return quality


def label_counts(labels: dict[str, RunLabel]) -> Counter[str]:
    """How many runs are labelled false stops (released) and true ones (aborted)."""
    return Counter("true_stops" if label.stuck else "false_stops" for label in labels.values())
