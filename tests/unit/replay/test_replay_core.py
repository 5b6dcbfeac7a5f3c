"""Replay without a broker or a database: an export file read back, the core's decisions compared
with a "recorded" list (equal, tampered, missing, incomplete), and both report forms."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from core_helpers import Run, loop_guard

from streams.core.events import Action, event_to_dict
from streams.replay.compare import (
    DIVERGED,
    INCOMPLETE,
    MATCH,
    NOT_FOUND,
    RunReport,
    attach_divergence_events,
    compare_with_audit,
    first_divergence,
    replay_events,
    replay_selection,
)
from streams.replay.event_file import parse_event_line, write_events_atomically
from streams.replay.report import Replayed, print_report, report_dict
from streams.replay.sources import FileSource, ReadStats, Selection, SourceError
from tests.unit.core.test_session import LOOP, loop_pairs, session_runs

CONFIG = {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}


def looping_run(run_id: str = "run-1") -> Run:
    run = Run(loop_guard(**CONFIG), run_id, "coder")
    run.start()
    while not any(d.action is Action.ABORT for d in run.decisions):
        run.cycle("grep", {"q": "x"}, {"text": "none"})
    run.end()
    return run


def replay_file(path: Path, recorded: dict, runs: tuple[str, ...] = ()):
    guard = loop_guard(**CONFIG)
    source = FileSource(str(path))
    selection = Selection(frozenset(runs))
    stats = ReadStats()
    replays = replay_events(guard, source.events(stats, selection))
    scope = list(runs) or sorted(replays)
    reports = compare_with_audit(guard, replays, scope, lambda r: recorded.get(r, []), bool(runs))
    attach_divergence_events(source, selection, reports)
    return stats, reports


def test_export_file_round_trip_matches_the_recorded_decisions(tmp_path: Path) -> None:
    run = looping_run()
    path = tmp_path / "events.jsonl"
    assert write_events_atomically(path, run.events) == {"run-1"}
    stats, [report] = replay_file(path, {"run-1": run.decisions})
    assert stats.messages == stats.selected == len(run.events)
    assert report.status == MATCH and report.divergence is None
    assert report.replayed == report.recorded == len(run.decisions)
    assert [parse_event_line(line) for line in path.read_text().splitlines()] == run.events


def test_a_tampered_decision_is_the_first_divergence_with_its_event(tmp_path: Path) -> None:
    run = looping_run()
    path = tmp_path / "events.jsonl"
    write_events_atomically(path, run.events)
    warn = next(d for d in run.decisions if d.action is Action.WARN)
    tampered = [replace(d, count=999) if d is warn else d for d in run.decisions]
    _, [report] = replay_file(path, {"run-1": tampered})
    assert report.status == DIVERGED
    assert report.divergence is not None
    assert report.divergence.seq == warn.seq
    assert report.divergence.fields == [("count", warn.count, 999)]
    assert report.divergence.event is not None and report.divergence.event.envelope.seq == warn.seq
    out = io.StringIO()
    replayed = Replayed("file x", "cfg", ReadStats(), [report])
    print_report(replayed, out)
    assert f"count: expected {warn.count}, recorded 999" in out.getvalue()
    doc = report_dict(replayed, code=3)
    assert doc["summary"] == {MATCH: 0, DIVERGED: 1, INCOMPLETE: 0, NOT_FOUND: 0}
    assert doc["runs"][0]["divergence"]["fields"] == [
        {"field": "count", "expected": warn.count, "recorded": 999}
    ]
    json.dumps(doc)  # JSON-ready


def test_an_observed_run_replays_exactly_and_enforced_is_compared(tmp_path: Path) -> None:
    """Shadow mode (mode "observe"): replayed with its own config the run matches its trail,
    enforced flags and all; replayed as enforced it diverges at its first decision, on
    ``enforced`` alone (the decisions themselves are the same)."""
    observe = {**CONFIG, "mode": "observe"}
    run = Run(loop_guard(**observe), "run-1", "coder")
    run.start()
    while not any(d.action is Action.ABORT for d in run.decisions):
        run.plain_cycle("grep", {"q": "x"}, {"text": "none"})  # the gateway never vetoes
    run.end()
    assert {d.enforced for d in run.decisions} == {False}
    path = tmp_path / "events.jsonl"
    write_events_atomically(path, run.events)
    recorded = {"run-1": run.decisions}

    def replay_with(config: dict) -> RunReport:
        guard = loop_guard(**config)
        replays = replay_events(guard, FileSource(str(path)).events(ReadStats(), Selection()))
        [report] = compare_with_audit(guard, replays, ["run-1"], recorded.__getitem__, True)
        return report

    assert replay_with(observe).status == MATCH
    report = replay_with(CONFIG)
    assert report.status == DIVERGED and report.divergence is not None
    assert report.divergence.seq == run.decisions[0].seq
    assert report.divergence.fields == [("enforced", True, False)]


def test_missing_and_extra_decisions_diverge_at_the_earlier_seq() -> None:
    decisions = looping_run().decisions
    assert first_divergence(decisions, decisions) is None
    missing = first_divergence(decisions, decisions[1:])
    assert missing is not None and missing.expected == decisions[0] and missing.recorded is None
    extra = first_divergence(decisions[1:], decisions)
    assert extra is not None and extra.recorded == decisions[0] and extra.expected is None


def test_runs_without_their_first_events_or_without_events(tmp_path: Path) -> None:
    run = looping_run()
    path = tmp_path / "events.jsonl"
    write_events_atomically(path, run.events[3:])
    _, reports = replay_file(path, {"run-1": run.decisions}, runs=("run-1", "run-absent"))
    assert [r.status for r in reports] == [INCOMPLETE, NOT_FOUND]


def test_a_bad_line_names_the_line_and_the_field(tmp_path: Path) -> None:
    good = event_to_dict(looping_run().events[0])
    path = tmp_path / "bad.jsonl"
    bad = {**good, "seq": "two"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(
        SourceError, match=r"bad.jsonl:2: invalid event: AgentEvent.seq must be an int"
    ):
        list(FileSource(str(path)).events(ReadStats(), Selection()))
    with pytest.raises(SourceError, match="not a readable file"):
        FileSource(str(tmp_path / "nope.jsonl"))


def test_a_session_run_alone_replays_with_its_sessions_earlier_run(tmp_path: Path) -> None:
    """Run B continued run A's loop (session scope): replaying B alone must seed it from A, as
    the worker did, so the file is replayed again with A's events and B still matches."""
    lg = loop_guard(**LOOP, scope="session")
    a, b, trigger = session_runs(lg)
    loop_pairs(a, 5)
    a.end()
    b.start(trigger)
    loop_pairs(b, 5)
    other = Run(lg, run_id="O", session_id="T")
    other.start()
    loop_pairs(other, 2)
    assert b.decisions and not a.decisions
    path = tmp_path / "events.jsonl"
    write_events_atomically(path, [*a.events, *other.events, *b.events])

    def replay_b(cfg: dict) -> tuple:
        done = replay_selection(
            lambda: loop_guard(**cfg),
            lambda _: ReadStats(),
            FileSource(str(path)),
            Selection(frozenset({"B"})),
        )
        [report] = compare_with_audit(done.guard, done.runs, ["B"], {"B": b.decisions}.get, True)
        return done, report

    done, report = replay_b({**LOOP, "scope": "session"})
    assert report.status == MATCH and report.replayed == len(b.decisions)
    assert done.selection.sessions == {"S"}
    assert set(done.runs) == {"A", "B"}  # the other session's run is not read in
    assert done.stats.selected == len(a.events) + len(b.events)
    # In run scope B never depended on A: one pass, B's events only (and no decisions now).
    done, report = replay_b(LOOP)
    assert done.selection.sessions == frozenset() and set(done.runs) == {"B"}
    assert report.status == DIVERGED and report.replayed == 0
