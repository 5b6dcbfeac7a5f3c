"""Replay events through the pure core and compare its decisions with the recorded ones, per run.

The comparison is field by field (all but ``config_version``) in ``(seq, detector, action)``
order, so the first divergence found is the earliest; a run whose first event is missing from
the selection cannot be re-derived and is marked incomplete instead of compared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any

from streams.core.events import AgentEvent, Decision
from streams.core.operator_command import OperatorCommand
from streams.replay.sources import ReadStats, Selection

# Fields a replayed decision must reproduce; ``config_version`` is reported separately.
COMPARED_FIELDS = tuple(f.name for f in dataclass_fields(Decision) if f.name != "config_version")

MATCH, DIVERGED, INCOMPLETE, NOT_FOUND = "match", "diverged", "incomplete", "not_found"
STATUSES = (MATCH, DIVERGED, INCOMPLETE, NOT_FOUND)


@dataclass
class RunReplay:
    """What the core made of one run's selected events."""

    run_id: str
    agent_id: str = ""
    session_id: str = ""
    events: int = 0
    first_seq: int | None = None
    decisions: list[Decision] = field(default_factory=list)


def replay_events(guard: Any, events: Iterable[AgentEvent]) -> dict[str, RunReplay]:
    """Feed events through the core; decisions grouped per run, in the order produced."""
    runs: dict[str, RunReplay] = {}
    for event in events:
        env = event.envelope
        run = runs.get(env.run_id)
        if run is None:
            run = runs[env.run_id] = RunReplay(env.run_id)
        if isinstance(event, OperatorCommand):  # an operator's, in its place (issue 43)
            run.decisions.extend(guard.process(event))
            continue
        run.events += 1
        run.agent_id = run.agent_id or env.agent_id
        run.session_id = run.session_id or env.session_id or ""
        run.first_seq = env.seq if run.first_seq is None else min(run.first_seq, env.seq)
        for decision in guard.process(event):
            runs.setdefault(decision.run_id, RunReplay(decision.run_id)).decisions.append(decision)
    # decisions made over many runs at the end (agent cycles: streams.replay.agent_cycles)
    for decision in guard.finish() if hasattr(guard, "finish") else []:
        runs.setdefault(decision.run_id, RunReplay(decision.run_id)).decisions.append(decision)
    return runs


@dataclass
class ReplayPass:
    """One replay of a source: the guard after it, its runs, what was selected and read."""

    guard: Any
    runs: dict[str, RunReplay]
    selection: Selection
    stats: ReadStats


def replay_selection(
    make_guard: Callable[[], Any],
    make_stats: Callable[[Any], ReadStats],
    source: Any,
    selection: Selection,
) -> ReplayPass:
    """Replay the selected events. A selected run of an agent in session scope was seeded from
    its session's previous run, so when there are such runs the source is replayed once more
    with every run of their sessions (only the selected runs are compared)."""
    guard = make_guard()
    stats = make_stats(guard)
    runs = replay_events(guard, source.events(stats, selection))
    sessions = frozenset(
        run.session_id
        for run_id in selection.runs
        if (run := runs.get(run_id)) is not None
        and run.session_id
        and guard.config_for(run.agent_id).session_scope
    )
    if not sessions:
        return ReplayPass(guard, runs, selection, stats)
    widened = replace(selection, sessions=sessions)
    guard = make_guard()
    stats = make_stats(guard)
    return ReplayPass(guard, replay_events(guard, source.events(stats, widened)), widened, stats)


def decision_order(decision: Decision) -> tuple[int, str, str]:
    """The order both decision lists are compared in."""
    return decision.seq, decision.detector, decision.action.value


@dataclass
class Divergence:
    """The first place where replay and audit trail disagree (either side may be missing)."""

    seq: int
    expected: Decision | None
    recorded: Decision | None
    fields: list[tuple[str, Any, Any]]
    event: AgentEvent | None = None


def first_divergence(expected: list[Decision], recorded: list[Decision]) -> Divergence | None:
    """First position where the two (sorted) decision lists differ, or None."""
    for index in range(max(len(expected), len(recorded))):
        exp = expected[index] if index < len(expected) else None
        rec = recorded[index] if index < len(recorded) else None
        if exp is not None and rec is not None:
            if decision_order(exp) != decision_order(rec):
                # Different decisions at this position: the earlier one is the divergence.
                if decision_order(exp) < decision_order(rec):
                    return Divergence(exp.seq, exp, None, [])
                return Divergence(rec.seq, None, rec, [])
            diff = [
                (name, getattr(exp, name), getattr(rec, name))
                for name in COMPARED_FIELDS
                if getattr(exp, name) != getattr(rec, name)
            ]
            if diff:
                return Divergence(exp.seq, exp, rec, diff)
        elif exp is not None:
            return Divergence(exp.seq, exp, None, [])
        elif rec is not None:
            return Divergence(rec.seq, None, rec, [])
    return None


@dataclass
class RunReport:
    """One run's verdict: its status, the counts compared and the first divergence, if any."""

    run_id: str
    agent_id: str
    status: str
    requested: bool
    events: int = 0
    first_seq: int | None = None
    last_seq: int = 0  # last event the core processed (in seq order)
    waiting: int = 0  # events held back behind a gap, as the worker would hold them
    duplicates: int = 0
    replayed: int = 0
    recorded: int = 0
    beyond: int = 0  # recorded decisions past last_seq: not comparable with this selection
    divergence: Divergence | None = None
    replay_version: str = ""
    recorded_versions: list[str] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    @property
    def version_differs(self) -> bool:
        return any(v != self.replay_version for v in self.recorded_versions)


def compare_run(
    run_id: str,
    replay: RunReplay | None,
    state: Any,
    recorded_all: list[Decision],
    replay_version: str,
    requested: bool,
) -> RunReport:
    agent = (replay.agent_id if replay else "") or (
        recorded_all[0].agent_id if recorded_all else ""
    )
    report = RunReport(run_id, agent, MATCH, requested, replay_version=replay_version)
    report.recorded_versions = sorted({d.config_version for d in recorded_all})
    if replay is None or replay.events == 0:
        report.status = NOT_FOUND
        report.recorded = len(recorded_all)
        return report
    report.events = replay.events
    report.first_seq = replay.first_seq
    report.decisions = sorted(replay.decisions, key=decision_order)
    if state is not None:
        report.last_seq = state.last_seq
        report.waiting = len(state.waiting)
        report.duplicates = state.stats.duplicates
    comparable = [d for d in recorded_all if d.seq <= report.last_seq]
    report.beyond = len(recorded_all) - len(comparable)
    report.replayed = len(report.decisions)
    report.recorded = len(comparable)
    if (replay.first_seq or 0) > 1:
        report.status = INCOMPLETE
        report.recorded, report.beyond = len(recorded_all), 0
        return report
    report.divergence = first_divergence(report.decisions, sorted(comparable, key=decision_order))
    if report.divergence is not None:
        report.status = DIVERGED
    return report


def compare_with_audit(
    guard: Any,
    runs: dict[str, RunReplay],
    scope: list[str],
    history: Callable[[str], list[Decision]],
    requested: bool,
) -> list[RunReport]:
    """One report per run in ``scope``: its replay against ``history(run_id)``."""
    reports = []
    for run_id in scope:
        replay = runs.get(run_id)
        agent = replay.agent_id if replay else ""
        recorded = history(run_id)
        if not agent and recorded:
            agent = recorded[0].agent_id
        reports.append(
            compare_run(
                run_id,
                replay,
                guard.runs.get(run_id),
                recorded,
                guard.config_for(agent).version,
                requested=requested,
            )
        )
    return reports


def attach_divergence_events(source: Any, selection: Selection, reports: list[RunReport]) -> None:
    """Give each divergence the event at its seq, read again from the source (first copy wins)."""
    wanted: dict[str, set[int]] = {}
    for report in reports:
        if report.divergence is not None:
            wanted.setdefault(report.run_id, set()).add(report.divergence.seq)
    if not wanted:
        return
    found: dict[tuple[str, int], AgentEvent] = {}
    need = sum(len(seqs) for seqs in wanted.values())
    narrowed = Selection(frozenset(wanted), selection.since_ms, selection.until_ms)
    for event in source.events(ReadStats(), narrowed):
        key = (event.envelope.run_id, event.envelope.seq)
        if key[1] in wanted.get(key[0], ()) and key not in found:
            found[key] = event
            if len(found) == need:
                break
    for report in reports:
        if report.divergence is not None:
            report.divergence.event = found.get((report.run_id, report.divergence.seq))


def status_counts(reports: list[RunReport]) -> dict[str, int]:
    """How many runs ended in each status (every status present, zeros included)."""
    counts = dict.fromkeys(STATUSES, 0)
    for report in reports:
        counts[report.status] += 1
    return counts
