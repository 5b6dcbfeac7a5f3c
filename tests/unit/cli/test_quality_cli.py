"""``loopguard quality`` end to end through ``main`` (issue 43): a real SQLite audit trail
(migrated, decisions recorded by the store, operators' releases and aborts as the workers
write them in ``operator_releases``), per rule and agent the stops, releases, release rate and
operator aborts, and with ``--from-file`` what moving the rule's threshold would have done to
the labelled runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from core_helpers import Run, loop_guard
from sqlalchemy.orm import Session

from streams.audit.labels import trail_quality
from streams.audit.models import OperatorReleaseRow
from streams.audit.store import AuditStore
from streams.cli.common import EXIT_OK
from streams.cli.main import main
from streams.replay.event_file import write_events_atomically

RECORDED = {
    "enabled": True,
    "warningThreshold": 3,
    "criticalThreshold": 6,
    "globalCircuitBreakerThreshold": 30,
    "abortAfterBlocks": 50,
}


def config_file(path: Path, block: dict) -> str:
    path.write_text(json.dumps({"tools": {"loopDetection": block}}))
    return str(path)


def release_row(run: Run, command: str, detector: str, **fields: object) -> OperatorReleaseRow:
    stop = next(d for d in run.decisions if d.action.value in ("block", "abort"))
    return OperatorReleaseRow(
        release_id=f"{command}-{run.run_id}",
        command=command,
        scope="run",
        run_id=run.run_id,
        agent_id=run.agent_id,
        reason=fields.pop("reason", ""),
        released_by="ops@example",
        source="cli",
        requested_at=1_700_000_100_000,
        applied_seq=stop.seq,
        released_detector=detector,
        released_action=stop.action.value,
        released_seq=stop.seq,
    )


@pytest.fixture
def trail(tmp_path: Path) -> dict:
    """Three runs that a rule blocked: one an operator released (it was fine), one an
    operator aborted (a real loop), one nobody touched; an export of their events."""
    lg = loop_guard(**RECORDED)
    plans = [("noisy", "coder", 7), ("stuck", "ops", 16), ("untouched", "ops", 9)]
    runs = []
    for i, (run_id, agent, cycles) in enumerate(plans):
        run = Run(lg, run_id, agent, start_time=1_700_000_000_000 + i * 10**6)
        run.start()
        for _ in range(cycles):
            run.cycle("grep", {"q": run_id}, {"text": "none"})
        for n in range(5):  # then different calls: work goes on
            run.cycle("read", {"path": f"f{n}"}, {"text": f"content {n}"})
        run.end()
        runs.append(run)
    events = tmp_path / "events.jsonl"
    write_events_atomically(events, [e for run in runs for e in run.events])
    db_url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(db_url) as store:
        store.migrate()
        store.record_decisions([d for run in runs for d in run.decisions])
        with Session(store.engine) as session:
            session.add(release_row(runs[0], "release", "generic_repeat", reason="slow build"))
            session.add(release_row(runs[1], "abort", ""))  # names no stop: its last rule
            session.commit()
    return {
        "db": db_url,
        "events": str(events),
        "config": config_file(tmp_path / "recorded.json", RECORDED),
        "runs": runs,
    }


def quality(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["quality", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_counts_per_rule_and_agent(trail: dict) -> None:
    with AuditStore(trail["db"]) as store:
        found = trail_quality(store)
    counts = found.rules["generic_repeat"]
    assert (counts.stops, counts.releases, counts.aborts) == (3, 1, 1)
    assert counts.release_rate == pytest.approx(1 / 3)
    assert found.agents[("generic_repeat", "coder")].releases == 1
    assert found.agents[("generic_repeat", "ops")].stops == 2
    labels = found.labels
    assert (labels["noisy"].stuck, labels["stuck"].stuck) == (False, True)
    assert labels["noisy"].why == "released by ops@example: slow build"
    assert labels["stuck"].rule == "generic_repeat"  # the run's last rule
    with AuditStore(trail["db"]) as store:
        only_ops = trail_quality(store, agent="ops")
    assert only_ops.rules["generic_repeat"].stops == 2 and "noisy" not in only_ops.labels


def test_the_report_and_the_threshold_what_if(trail: dict, capsys) -> None:
    code, out, _ = quality(capsys, "--db", trail["db"])
    assert code == EXIT_OK
    assert "generic_repeat  (all)  3      1         33%           1" in out
    assert "labelled runs: 1 released (false stops), 1 aborted by an operator" in out
    assert "threshold what-if: give --from-file FILE or --from-topic" in out

    args = ["--db", trail["db"], "--from-file", trail["events"], "--config", trail["config"]]
    code, out, _ = quality(capsys, *args, "--json", "--progress", "0")
    assert code == EXIT_OK
    doc = json.loads(out)
    assert doc["rules"]["generic_repeat"]["release_rate"] == pytest.approx(0.3333)
    (rule,) = doc["threshold_what_if"]
    assert rule["rule"] == "generic_repeat" and rule["threshold_field"] == "criticalThreshold"
    by_delta = {v["delta"]: v for v in rule["variants"]}
    assert sorted(by_delta) == [-2, -1, 0, 1, 2]
    assert by_delta[0]["threshold"] == 6
    # as recorded, both labelled runs are stopped; looser, the released one no longer is,
    # and the real loop still is; stricter, both are, earlier
    assert (by_delta[0]["false_stops_kept"], by_delta[0]["true_stops_caught"]) == (1, 1)
    assert (by_delta[2]["false_stops_kept"], by_delta[2]["true_stops_caught"]) == (0, 1)
    assert by_delta[-2]["stop_seqs"]["stuck"] < by_delta[0]["stop_seqs"]["stuck"]
    recorded_stop = next(d.seq for d in trail["runs"][1].decisions if d.action.value == "block")
    assert by_delta[0]["stop_seqs"]["stuck"] == recorded_stop

    code, out, _ = quality(capsys, *args, "--progress", "0")
    assert "generic_repeat (criticalThreshold): 1 released, 1 aborted by an operator" in out
    assert "6 (now)" in out and "8 (+2)" in out


def test_an_empty_trail_says_so(tmp_path: Path, capsys) -> None:
    db_url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(db_url) as store:
        store.migrate()
    code, out, _ = quality(capsys, "--db", db_url)
    assert code == EXIT_OK
    assert out.strip() == "no stops, releases or operator aborts in the audit trail"
