"""``loopguard backtest`` against a real pipeline: a ping-pong loop is driven through the
embedded broker and a worker into a SQLite audit trail, then backtested from the events topic
and from an export file with the worker's config (no change), a looser config (the run is no
longer stopped) and a stricter one (stopped earlier); the counts are the core's own."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from services import ENABLED, Pipeline
from test_pipeline import expected_decisions
from test_replay import record_loop

from streams.audit.store import AuditStore
from streams.cli.common import EXIT_OK
from streams.cli.main import main
from streams.core.events import Action
from streams.replay.backtest import until_abort

pytestmark = pytest.mark.integration

LOOSER = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 40, "criticalThreshold": 80}}
}
STRICTER = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 4, "criticalThreshold": 6}}
}


@pytest.fixture(scope="module")
def recorded(broker, tmp_path_factory):
    """One worker with one aborted ping-pong loop in a SQLite audit trail."""
    workdir = tmp_path_factory.mktemp("backtest")
    db_url = f"sqlite:///{workdir / 'audit.db'}"
    with AuditStore(db_url) as store:
        store.migrate()
    pipeline = Pipeline(broker, db_url, workdir, config=ENABLED).setup()
    try:
        client = pipeline.start_ready()
        run, expected = record_loop(pipeline, client, "coder")
        config = workdir / f"{pipeline.prefix}-config.json"
        yield pipeline, run, expected, str(config), workdir
    finally:
        pipeline.close()


def backtest(capsys, pipeline: Pipeline, config: str, *extra: str) -> dict:
    args = [
        "backtest",
        *("--broker", pipeline.broker.url, "--topic-prefix", pipeline.prefix),
        *("--db", pipeline.db_url, "--config", config, "--json"),
        *extra,
    ]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == EXIT_OK, out + err
    assert "Traceback" not in err
    return {**json.loads(out), "stderr": err}


def counts(decisions) -> dict[str, int]:
    """Decisions per action, as backtest counts them: up to the run's first abort."""
    counted = Counter(d.action.value for d in until_abort(decisions))
    return {a.value: counted[a] for a in Action}


def write(workdir: Path, name: str, doc: dict) -> str:
    path = workdir / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_backtest_from_the_topic(recorded, capsys) -> None:
    pipeline, run, expected, config, workdir = recorded
    only = ("--run", run.run_id)

    same = backtest(capsys, pipeline, config, *only, "--progress", "10")
    assert same["baseline"]["kind"] == "audit_trail"
    assert same["runs_compared"] == 1
    assert same["totals"]["baseline"] == same["totals"]["candidate"] == counts(expected)
    assert same["newly_stopped"] == same["no_longer_stopped"] == []
    assert same["stopped_at_another_seq"] == []
    assert "backtest: 10 messages read" in same["stderr"]

    looser = expected_decisions(run.events, LOOSER)
    assert not any(d.action is not Action.WARN for d in looser)  # what this test relies on
    doc = backtest(capsys, pipeline, write(workdir, "looser.json", LOOSER), *only)
    assert doc["totals"] == {"baseline": counts(expected), "candidate": counts(looser)}
    (gone,) = doc["no_longer_stopped"]
    assert gone["run_id"] == run.run_id and gone["change"] == "no_longer_aborted"

    stricter = expected_decisions(run.events, STRICTER)
    doc = backtest(capsys, pipeline, write(workdir, "stricter.json", STRICTER), *only)
    assert doc["totals"]["candidate"] == counts(stricter)
    first_stop = min(d.seq for d in stricter if d.action is not Action.WARN)
    (moved,) = doc["stopped_at_another_seq"]
    assert moved["change"] == "stopped_earlier" and moved["candidate"]["stop_seq"] == first_stop


def test_backtest_of_an_export_file_matches_the_topic(recorded, capsys, tmp_path) -> None:
    pipeline, run, expected, config, workdir = recorded
    path = tmp_path / "export.jsonl"
    code = main(
        [
            "export",
            *("--broker", pipeline.broker.url, "--topic-prefix", pipeline.prefix),
            *("--run", run.run_id, "--progress", "0", "-o", str(path)),
        ]
    )
    capsys.readouterr()
    assert code == EXIT_OK
    stricter = write(workdir, "stricter.json", STRICTER)
    from_topic = backtest(capsys, pipeline, stricter, "--run", run.run_id)
    from_file = backtest(capsys, pipeline, stricter, "--from-file", str(path))
    for key in ("by_agent_detector", "totals", "newly_stopped", "stopped_at_another_seq"):
        assert from_file[key] == from_topic[key], key
    assert from_file["source"] == f"file {path}"


COMPAT = {"tools": {"loopDetection": {"enabled": True, "compat": "openclaw"}}}


def test_per_rule_from_the_topic(recorded, capsys) -> None:
    """Issue 29: --per-rule reads the events topic like the rest of backtest; what it reports
    per rule is what the core makes of the events the gateway published."""
    from streams.core.fleet import fleet_from_document
    from streams.replay.per_rule import per_rule_backtest

    pipeline, run, _, config, workdir = recorded
    compat = write(workdir, "compat.json", COMPAT)
    doc = backtest(
        capsys, pipeline, config, "--run", run.run_id, "--baseline-config", compat, "--per-rule"
    )
    assert doc["baseline_config"] == compat and doc["runs_compared"] == 1
    worker = fleet_from_document(json.loads(Path(config).read_text()))
    direct = per_rule_backtest(fleet_from_document(COMPAT), worker, run.events)
    assert [r["rule"] for r in doc["rules"]] == [r.rule for r in direct.rules]
    assert doc["rules"] == [r.to_dict() for r in direct.rules]
    assert any(r["runs_changed"] for r in doc["rules"])  # a ping-pong: some rule moves it
