"""``loopguard backtest --labels-from-audit DB_URL`` (issue 43): the runs operators released
(labelled false stops) and aborted (labelled true loops) in the audit trail, and how many of
each the baseline and the candidate stop; through ``main`` on a real SQLite trail."""

from __future__ import annotations

import json
from pathlib import Path

from core_helpers import Run, loop_guard
from sqlalchemy.orm import Session

from streams.audit.models import OperatorReleaseRow
from streams.audit.store import AuditStore
from streams.cli.common import EXIT_OK
from streams.cli.main import main
from streams.replay.event_file import write_events_atomically

RECORDED = {"enabled": True, "warningThreshold": 3, "criticalThreshold": 6, "abortAfterBlocks": 50}
LOOSER = {**RECORDED, "criticalThreshold": 9}


def command(run: Run, name: str) -> OperatorReleaseRow:
    stop = next(d for d in run.decisions if d.action.value == "block")
    return OperatorReleaseRow(
        release_id=f"{name}-{run.run_id}",
        command=name,
        scope="run",
        run_id=run.run_id,
        agent_id=run.agent_id,
        reason="",
        released_by="ops",
        source="cli",
        requested_at=1,
        applied_seq=stop.seq,
        released_detector=stop.detector,
        released_action="block",
        released_seq=stop.seq,
    )


def test_both_sides_scored_on_the_labelled_runs(tmp_path: Path, capsys) -> None:
    lg = loop_guard(**RECORDED)
    runs = []
    for i, (run_id, cycles) in enumerate([("slow-build", 7), ("stuck", 16)]):
        run = Run(lg, run_id, "coder", start_time=1_700_000_000_000 + i * 10**6)
        run.start()
        for _ in range(cycles):
            run.cycle("grep", {"q": run_id}, {"text": "none"})
        run.end()
        runs.append(run)
    events = tmp_path / "events.jsonl"
    write_events_atomically(events, [e for run in runs for e in run.events])
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(db) as store:
        store.migrate()
        store.record_decisions([d for run in runs for d in run.decisions])
        with Session(store.engine) as session:
            session.add_all([command(runs[0], "release"), command(runs[1], "abort")])
            session.commit()
    looser = tmp_path / "looser.json"
    looser.write_text(json.dumps({"tools": {"loopDetection": LOOSER}}))
    args = ["backtest", "--config", str(looser), "--from-file", str(events), "--db", db]
    args += ["--labels-from-audit", db, "--progress", "0"]

    assert main(args) == EXIT_OK
    out = capsys.readouterr().out
    assert (
        f"labelled runs ({db}): 1 released (false stops): baseline stops 1, candidate stops 0; "
        "1 aborted by an operator (true loops): baseline stops 1, candidate stops 1"
    ) in out

    assert main([*args, "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)["labelled"]
    assert (doc["false_stops"], doc["true_stops"]) == (1, 1)
    assert doc["false_stops_stopped"] == {"baseline": 1, "candidate": 0}
    by_run = {run["run_id"]: run for run in doc["runs"]}
    assert by_run["slow-build"]["label"] == "false_stop"
    assert by_run["slow-build"]["candidate_stop_seq"] is None
    assert by_run["stuck"]["candidate_stop_seq"] > by_run["stuck"]["baseline_stop_seq"]
