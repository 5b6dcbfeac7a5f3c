"""Backtest diff logic without a broker or a database: how a run's ending is classified, the
counts per agent and detector, the baseline cut at the last replayed event, runs that cannot be
compared, the paired (config) baseline, and both report forms."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
from core_helpers import Run, loop_guard

from streams.core.events import Action, Decision
from streams.replay.backtest import (
    CONFIG,
    NEWLY_ABORTED,
    NEWLY_BLOCKED,
    NO_LONGER_ABORTED,
    NO_LONGER_BLOCKED,
    STOPPED_EARLIER,
    STOPPED_LATER,
    TRAIL,
    Baseline,
    PairedGuard,
    backtest,
    cached,
    classify,
    outcome,
    until_abort,
)
from streams.replay.backtest_report import Backtested, backtest_dict, print_backtest
from streams.replay.compare import INCOMPLETE, NOT_FOUND, compare_with_audit, replay_events
from streams.replay.event_file import write_events_atomically
from streams.replay.sources import FileSource, ReadStats, Selection

LOOSE = {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}
STRICT = {"enabled": True, "warningThreshold": 3, "criticalThreshold": 6}


def decision(seq: int, action: Action, detector: str = "generic_repeat") -> Decision:
    return Decision("r", "a", "g", seq, seq, action, detector, "warning", 1, "t", "why")


W, B, A = Action.WARN, Action.BLOCK, Action.ABORT


@pytest.mark.parametrize(
    ("before", "after", "change"),
    [
        ([], [], None),
        ([], [(4, W)], None),  # a new warning does not stop a run
        ([(4, W)], [(2, W), (3, B)], NEWLY_BLOCKED),
        ([], [(3, A)], NEWLY_ABORTED),
        ([(5, B)], [(5, B), (7, A)], NEWLY_ABORTED),  # blocked before, aborted now
        ([(5, B), (7, A)], [(5, B)], NO_LONGER_ABORTED),  # still blocked, no longer aborted
        ([(5, B)], [(4, W)], NO_LONGER_BLOCKED),
        ([(5, B)], [], NO_LONGER_BLOCKED),
        ([(8, B)], [(5, B)], STOPPED_EARLIER),
        ([(5, B)], [(8, B)], STOPPED_LATER),
        ([(5, B), (9, A)], [(5, B), (7, A)], None),  # first stop at the same seq
        ([(5, W), (6, B)], [(5, W), (6, B)], None),
    ],
)
def test_a_runs_ending_is_classified(before, after, change) -> None:
    base = outcome(decision(s, a) for s, a in before)
    cand = outcome(decision(s, a) for s, a in after)
    assert classify(base, cand) == change


def test_outcome_names_the_worst_action_and_the_first_stop() -> None:
    out = outcome([decision(9, A, "run_aborted"), decision(3, W), decision(6, B)])
    assert out.counts == {"warn": 1, "block": 1, "abort": 1}
    assert (out.worst, out.worst_seq, out.worst_detector) == ("abort", 9, "run_aborted")
    assert (out.stop_seq, out.stop_detector) == (6, "generic_repeat")
    assert outcome([]).worst is None and outcome([]).stop_seq is None


def test_decisions_after_the_first_abort_are_not_counted() -> None:
    decisions = [decision(9, A, "run_aborted"), decision(3, W), decision(6, A), decision(6, B)]
    kept = until_abort(decisions)
    assert [(d.seq, d.action) for d in kept] == [(3, W), (6, A), (6, B)]  # decision_order
    assert until_abort([decision(2, W)]) == [decision(2, W)] and until_abort([]) == []


def looping(lg, run_id: str, agent: str, cycles: int, start_time: int = 0) -> Run:
    run = Run(lg, run_id, agent, start_time=1_700_000_000_000 + start_time)
    run.start()
    for _ in range(cycles):
        run.cycle("grep", {"q": run_id}, {"text": "none"})
    run.end()
    return run


def recorded_traffic(path: Path) -> dict[str, list[Decision]]:
    """Three runs recorded under LOOSE, written to ``path``: their audit trail."""
    lg = loop_guard(**LOOSE)
    runs = [
        looping(lg, "short", "coder", 4),
        looping(lg, "long", "coder", 12, 10**6),
        looping(lg, "ops-run", "ops", 25, 2 * 10**6),
    ]
    write_events_atomically(path, [e for run in runs for e in run.events])
    return {run.run_id: run.decisions for run in runs}


def run_backtest(path: Path, candidate: dict, history, selection: Selection | None = None):
    selection = selection or Selection()
    guard = loop_guard(**candidate)
    stats = ReadStats()
    replays = replay_events(guard, FileSource(str(path)).events(stats, selection))
    scope = sorted(replays)
    reports = compare_with_audit(guard, replays, scope, history, requested=False)
    return stats, backtest(reports, history)


def test_a_stricter_candidate_against_the_recorded_trail(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    trail = recorded_traffic(path)
    _, result = run_backtest(path, STRICT, lambda r: trail.get(r, []))
    assert result.compared == 3 and result.skipped == []

    # Counts per (agent, detector, action) are exactly the two decision lists counted.
    strict = loop_guard(**STRICT)
    replayed = list(strict.process_all(FileSource(str(path)).events(ReadStats(), Selection())))
    by_run: dict[str, list[Decision]] = {}
    for d in replayed:
        by_run.setdefault(d.run_id, []).append(d)
    for side, decisions in (
        ("baseline", [d for ds in trail.values() for d in until_abort(ds)]),
        ("candidate", [d for ds in by_run.values() for d in until_abort(ds)]),
    ):
        expected = Counter((d.agent_id, d.detector, d.action.value) for d in decisions)
        got = Counter(
            {
                (row.agent_id, row.detector, action): n
                for row in result.rows
                for action, n in getattr(row, side).items()
                if n
            }
        )
        assert got == expected, side

    changes = {c.run_id: c for c in result.changes}
    # "short" (4 repeats) warns under STRICT but is not stopped: not a change of ending.
    assert "short" not in changes
    assert changes["long"].change in (NEWLY_BLOCKED, NEWLY_ABORTED)
    assert changes["long"].baseline.worst is None or changes["long"].baseline.worst == "warn"
    assert changes["long"].candidate.stop_seq is not None
    # "ops-run" was stopped by the recorded config too, but STRICT stops it earlier.
    assert changes["ops-run"].change == STOPPED_EARLIER
    assert changes["ops-run"].candidate.stop_seq < changes["ops-run"].baseline.stop_seq

    # The other way round: the loose config no longer stops what STRICT stopped.
    strict_trail: dict[str, list[Decision]] = {}
    for d in replayed:
        strict_trail.setdefault(d.run_id, []).append(d)
    _, back = run_backtest(path, LOOSE, lambda r: strict_trail.get(r, []))
    assert {c.run_id: c.change for c in back.changes} == {
        "long": NO_LONGER_ABORTED if changes["long"].change == NEWLY_ABORTED else NO_LONGER_BLOCKED,
        "ops-run": STOPPED_LATER,
    }


def test_recorded_decisions_after_the_last_replayed_event_are_not_counted(tmp_path) -> None:
    path = tmp_path / "events.jsonl"
    trail = recorded_traffic(path)
    ops = trail["ops-run"]
    first_stop = next(d for d in ops if d.action is not Action.WARN)
    # Up to (not including) the event that was first stopped: the stop is out of reach.
    cut = Selection(frozenset({"ops-run"}), until_ms=first_stop.event_time)
    _, result = run_backtest(path, LOOSE, lambda r: trail.get(r, []), cut)
    assert result.compared == 1 and result.changes == []
    assert all(row.baseline == row.candidate for row in result.rows)
    assert sum(row.baseline["block"] + row.baseline["abort"] for row in result.rows) == 0


def test_runs_without_their_first_events_are_not_compared(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    trail = recorded_traffic(path)
    late = trail["long"][0].event_time
    guard = loop_guard(**STRICT)
    replays = replay_events(
        guard, FileSource(str(path)).events(ReadStats(), Selection(since_ms=late))
    )
    reports = compare_with_audit(
        guard, replays, [*sorted(replays), "absent"], lambda r: trail.get(r, []), True
    )
    result = backtest(reports, lambda r: trail.get(r, []))
    # "long" lost its first events; "ops-run" starts after the cut and is whole.
    assert {r.run_id: r.status for r in result.skipped} == {"long": INCOMPLETE, "absent": NOT_FOUND}
    assert result.compared == 1
    assert {row.agent_id for row in result.rows} == {"ops"}
    assert [c.run_id for c in result.changes] == ["ops-run"]


def test_the_paired_guard_gives_each_config_its_own_decisions(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    trail = recorded_traffic(path)
    paired = PairedGuard(loop_guard(**STRICT), loop_guard(**LOOSE))
    events = list(FileSource(str(path)).events(ReadStats(), Selection()))
    replays = replay_events(paired, events)
    assert {r: paired.history(r) for r in trail} == trail  # LOOSE is what recorded the trail
    alone = loop_guard(**STRICT)
    assert [d for r in replays.values() for d in r.decisions] == list(alone.process_all(events))
    assert paired.history("nobody") == []


def test_cached_history_is_asked_once_per_run() -> None:
    asked: list[str] = []

    def history(run_id: str) -> list[Decision]:
        asked.append(run_id)
        return []

    lookup = cached(history)
    for run_id in ("a", "b", "a", "a"):
        lookup(run_id)
    assert asked == ["a", "b"]


def test_both_report_forms(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    trail = recorded_traffic(path)
    stats, result = run_backtest(path, STRICT, lambda r: trail.get(r, []))
    done = Backtested(
        "file x",
        "strict.json",
        Baseline(TRAIL, "decisions recorded in the audit trail db"),
        stats,
        result,
    )
    out = io.StringIO()
    print_backtest(done, out)
    text = out.getvalue()
    assert "baseline: decisions recorded in the audit trail db" in text
    assert "agent  detector" in text and "total" in text
    assert "runs newly blocked or aborted (1):" in text
    assert "runs stopped at another seq (1):" in text
    assert "summary: 3 run(s) compared, 1 newly stopped, 0 no longer stopped" in text

    doc = backtest_dict(done, code=0)
    json.dumps(doc)  # JSON-ready
    assert doc["baseline"] == {
        "kind": TRAIL,
        "description": "decisions recorded in the audit trail db",
        "reason": None,
    }
    assert [c["run_id"] for c in doc["newly_stopped"]] == ["long"]
    assert [c["run_id"] for c in doc["stopped_at_another_seq"]] == ["ops-run"]
    assert doc["no_longer_stopped"] == []
    for row in doc["by_agent_detector"]:
        assert row["delta"] == {a: row["candidate"][a] - row["baseline"][a] for a in row["delta"]}
    for side in ("baseline", "candidate"):
        assert doc["totals"][side] == {
            a: sum(row[side][a] for row in doc["by_agent_detector"])
            for a in ("warn", "block", "abort")
        }

    same = Backtested(
        "file x", "loose.json", Baseline(CONFIG, "decisions of config loose"), stats, result
    )
    same.result = run_backtest(path, LOOSE, lambda r: trail.get(r, []))[1]
    out = io.StringIO()
    print_backtest(same, out)
    assert "no run would be stopped (blocked or aborted) differently" in out.getvalue()
    assert "->" not in out.getvalue().split("summary")[0].split("baseline:")[1]
