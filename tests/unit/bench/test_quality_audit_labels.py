"""``bench/quality_bench.py --labels-from-audit DB_URL`` (issue 43): the runs operators
released (a false stop: not stuck) or aborted (stuck) in an audit trail label the corpus's
runs, over what ``--labels`` says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from bench.quality.command import main
from bench.quality.corpus import audit_labels
from streams.audit.models import OperatorReleaseRow
from streams.audit.store import AuditStore
from streams.core.events import Envelope, RunEnded, RunStarted, ToolCall, ToolResult
from streams.replay.event_file import write_event_lines


def exec_run(run_id: str, calls: list[str]) -> list:
    seq = iter(range(1, 1000))

    def env() -> Envelope:
        n = next(seq)
        return Envelope(run_id, "coder", "import", n, 1_000 + n)

    result = json.dumps({"details": {"status": "completed", "exitCode": 1, "aggregated": "FAIL"}})
    events: list = [RunStarted(env())]
    for i, command in enumerate(calls, 1):
        args = json.dumps({"command": command})
        events += [ToolCall(env(), "exec", args, f"c{i}"), ToolResult(env(), "exec", args, result)]
    return [*events, RunEnded(env())]


def command_row(run_id: str, command: str) -> OperatorReleaseRow:
    return OperatorReleaseRow(
        release_id=f"{command}-{run_id}",
        command=command,
        scope="run",
        run_id=run_id,
        agent_id="coder",
        reason="seen by ops",
        released_by="ops",
        source="cli",
        requested_at=5_000,
        applied_seq=3,
        released_detector="generic_repeat",
        released_action="block",
        released_seq=3,
    )


@pytest.fixture
def corpus_and_trail(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "runs.jsonl"
    with path.open("w", encoding="utf-8") as out:
        write_event_lines(exec_run("a", ["make"] * 12) + exec_run("b", ["test"] * 12), out)
    (tmp_path / "runs.jsonl.outcomes.jsonl").write_text(
        "".join(json.dumps({"run_id": r, "outcome": "unresolved"}) + "\n" for r in "ab")
    )
    db_url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(db_url) as store:
        store.migrate()
        with Session(store.engine) as session:
            session.add_all([command_row("a", "release"), command_row("b", "abort")])
            session.commit()
    return path, db_url


def test_releases_label_false_stops_and_aborts_true_ones(corpus_and_trail, capsys) -> None:
    path, db_url = corpus_and_trail
    labels = audit_labels(db_url)
    assert (labels["a"].stuck, labels["b"].stuck) == (False, True)
    assert labels["a"].why == "operator released by ops: seen by ops (generic_repeat)"
    assert main([str(path), "--labels-from-audit", db_url]) == 0
    out = capsys.readouterr().out
    assert "labels: 1 stuck, 1 not stuck, 0 unlabelled" in out
    assert "labelled not stuck, stopped: a (" in out  # the default rules stop the released run


def test_a_missing_trail_is_bad_input(corpus_and_trail, tmp_path: Path, capsys) -> None:
    path, _ = corpus_and_trail
    missing = f"sqlite:///{tmp_path / 'nowhere.db'}"
    assert main([str(path), "--labels-from-audit", missing]) == 2
    assert "--labels-from-audit: no audit trail at" in capsys.readouterr().err
    assert not (tmp_path / "nowhere.db").exists()
