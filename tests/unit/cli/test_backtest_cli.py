"""``loopguard backtest --from-file`` end to end through ``main``: a real SQLite audit trail
(migrated and filled by the store, no SQL mocked), the baseline it picks (trail, the current
config when there is no trail, ``--baseline-config``), text and ``--json``, progress on stderr,
and one-line errors for bad input and an unusable trail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from core_helpers import Run, exec_result, loop_guard

from streams.audit.store import AuditStore
from streams.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from streams.cli.main import main
from streams.core.events import Decision
from streams.replay.event_file import write_events_atomically
from streams.replay.per_rule import RULES

RECORDED = {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}
STRICT = {"enabled": True, "warningThreshold": 3, "criticalThreshold": 6}


def config_file(path: Path, block: dict) -> str:
    path.write_text(json.dumps({"tools": {"loopDetection": block}}))
    return str(path)


@pytest.fixture
def traffic(tmp_path: Path) -> dict:
    """Two runs recorded under RECORDED: an export file and a migrated SQLite trail."""
    lg = loop_guard(**RECORDED)
    runs = []
    for i, (run_id, agent, cycles) in enumerate([("calm", "coder", 4), ("loop", "ops", 14)]):
        run = Run(lg, run_id, agent, start_time=1_700_000_000_000 + i * 10**6)
        run.start()
        for _ in range(cycles):
            run.cycle("grep", {"q": run_id}, {"text": "none"})
        run.end()
        runs.append(run)
    events = tmp_path / "events.jsonl"
    write_events_atomically(events, [e for run in runs for e in run.events])
    db_url = f"sqlite:///{tmp_path / 'audit.db'}"
    decisions: list[Decision] = [d for run in runs for d in run.decisions]
    with AuditStore(db_url) as store:
        store.migrate()
        store.record_decisions(decisions)
    return {
        "events": str(events),
        "db": db_url,
        "strict": config_file(tmp_path / "strict.json", STRICT),
        "recorded": config_file(tmp_path / "recorded.json", RECORDED),
        "decisions": decisions,
        "runs": runs,
    }


def backtest(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["backtest", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_against_the_audit_trail_text_and_json(traffic: dict, capsys) -> None:
    args = ["--config", traffic["strict"], "--from-file", traffic["events"], "--db", traffic["db"]]
    code, out, err = backtest(capsys, *args, "--progress", "10")
    assert code == EXIT_OK, out + err
    assert f"baseline: decisions recorded in the audit trail {traffic['db']}" in out
    assert "runs newly blocked or aborted (1):" in out
    assert "  loop  agent=ops  " in out
    assert "summary: 2 run(s) compared, 1 newly stopped" in out
    assert "backtest: 10 messages read" in err  # progress on stderr, not in the report

    code, out, _ = backtest(capsys, *args, "--json", "--progress", "0")
    assert code == EXIT_OK
    assert len(out.splitlines()) == 1, "--json prints one JSON line (docs/cli.md)"
    doc = json.loads(out)
    assert doc["baseline"]["kind"] == "audit_trail"
    assert doc["runs_compared"] == 2 and doc["events"] == sum(
        len(r.events) for r in traffic["runs"]
    )
    recorded_warns = sum(1 for d in traffic["decisions"] if d.action.value == "warn")
    assert doc["totals"]["baseline"] == {"warn": recorded_warns, "block": 0, "abort": 0}
    (newly,) = doc["newly_stopped"]
    assert newly["run_id"] == "loop" and newly["agent_id"] == "ops"
    assert newly["baseline"]["worst"] == "warn" and newly["candidate"]["stop_seq"] is not None

    # The recorded config against its own trail: nothing changes.
    code, out, _ = backtest(
        capsys,
        "--config",
        traffic["recorded"],
        "--from-file",
        traffic["events"],
        "--db",
        traffic["db"],
    )
    assert code == EXIT_OK
    assert "no run would be stopped (blocked or aborted) differently" in out
    assert "->" not in out


def test_without_a_trail_the_current_config_is_the_baseline(
    traffic: dict, capsys, monkeypatch, tmp_path: Path
) -> None:
    missing = f"sqlite:///{tmp_path / 'nowhere' / 'audit.db'}"
    monkeypatch.setenv("LOOPGUARD_CONFIG", traffic["recorded"])
    args = ["--config", traffic["strict"], "--from-file", traffic["events"], "--db", missing]
    code, out, _ = backtest(capsys, *args, "--json")
    assert code == EXIT_OK, out
    doc = json.loads(out)
    assert doc["baseline"]["kind"] == "config"
    assert traffic["recorded"] in doc["baseline"]["description"]
    assert doc["baseline"]["reason"] == f"no audit trail at {missing}"
    assert [c["run_id"] for c in doc["newly_stopped"]] == ["loop"]
    assert not (tmp_path / "nowhere").exists()  # a backtest never creates a trail

    monkeypatch.delenv("LOOPGUARD_CONFIG")
    code, out, _ = backtest(capsys, *args)
    assert code == EXIT_OK
    assert "baseline: decisions of the current config (the built-in defaults" in out
    assert f"(no audit trail at {missing})" in out

    # --baseline-config wins over the trail.
    code, out, _ = backtest(
        capsys, *args[:4], "--db", traffic["db"], "--baseline-config", traffic["strict"]
    )
    assert code == EXIT_OK
    assert f"baseline: decisions of config {traffic['strict']} on the same events" in out
    assert "no run would be stopped (blocked or aborted) differently" in out


def test_bad_input_and_an_unusable_trail_are_one_line(traffic: dict, capsys, tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tools": {"loopDetection": {"warningThreshold": "3"}}}))
    empty_db = f"sqlite:///{tmp_path / 'empty.db'}"
    AuditStore(empty_db).close()  # a database without the audit schema
    (tmp_path / "empty.db").touch()
    base = ["--from-file", traffic["events"], "--db", traffic["db"]]
    cases = [
        (["--config", str(bad), *base], EXIT_USAGE, "invalid --config config"),
        (
            ["--config", traffic["strict"], "--baseline-config", str(bad), *base],
            EXIT_USAGE,
            "invalid --baseline-config config",
        ),
        (
            ["--config", traffic["strict"], "--from-file", str(tmp_path / "nope.jsonl")],
            EXIT_USAGE,
            "nope.jsonl: not a readable file",
        ),
        (
            ["--config", traffic["strict"], *base, "--since", "9", "--until", "5"],
            EXIT_USAGE,
            "--since",
        ),
        (["--config", traffic["strict"], *base, "--from-offset", "3"], EXIT_USAGE, "--from-offset"),
        (
            ["--config", traffic["strict"], "--from-file", traffic["events"], "--db", empty_db],
            EXIT_ERROR,
            "has no schema yet",
        ),
        (["--config", traffic["strict"], *base, "--run", "absent"], EXIT_ERROR, ""),
    ]
    for args, expected, why in cases:
        code, out, err = backtest(capsys, *args, "--progress", "0")
        assert code == expected, (args, out, err)
        if why:
            assert why in err, (args, err)
            assert err.count("\n") == 1, err  # one line
    code, out, _ = backtest(capsys, "--config", traffic["strict"], *base, "--run", "absent")
    assert "not compared: run absent (no events of it in the selection)" in out


def test_an_unreachable_broker_is_one_line(traffic: dict, capsys) -> None:
    code, out, err = backtest(
        capsys,
        *("--config", traffic["strict"], "--db", traffic["db"], "--progress", "0"),
        *("--broker", "kafka://127.0.0.1:1"),
    )
    assert code == EXIT_ERROR, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "127.0.0.1:1" in lines[0] and "--broker" in lines[0], lines
    assert lines[0].startswith("loopguard backtest: ")


def test_per_rule_against_a_compat_baseline(capsys, tmp_path: Path) -> None:
    """Issue 29's migration step: traffic recorded under compat mode, the shipped rules as
    the candidate, one rule at a time; --per-rule needs a baseline config."""
    compat = {"enabled": True, "compat": "openclaw"}
    lg = loop_guard(**compat)
    run = Run(lg, "build", "coder")
    run.start()
    for i in range(25):
        run.cycle("exec", {"command": "make"}, exec_result(f"failed at 10:00:{i:02d}", exit_code=2))
    run.end()
    events = tmp_path / "events.jsonl"
    write_events_atomically(events, run.events)
    now = config_file(tmp_path / "now.json", compat)
    shipped = config_file(tmp_path / "next.json", {"enabled": True})
    base = ["--config", shipped, "--from-file", str(events)]

    code, out, err = backtest(capsys, *base, "--per-rule")
    assert code == EXIT_USAGE and "--baseline-config" in err and err.count("\n") == 1

    code, out, err = backtest(capsys, *base, "--baseline-config", now, "--per-rule")
    assert code == EXIT_OK, out + err
    assert f"per-rule backtest of {shipped} against {now}" in out
    assert "deviations.maskExecOutput -> on: 1 run(s)" in out
    assert "    build  agent=coder  " in out and "warn only -> block at seq" in out
    assert f"summary: {len(RULES)} rule(s) differ, 1 run(s) compared, 0 not compared" in out

    code, out, _ = backtest(capsys, *base, "--baseline-config", now, "--per-rule", "--json")
    assert code == EXIT_OK
    rows = {row["rule"]: row for row in json.loads(out)["rules"]}
    assert rows["deviations.maskExecOutput"]["stopped_earlier"]["runs"] == 1
    assert rows["deviations.sendsByToolName"]["runs_changed"] == 0

    code, out, _ = backtest(capsys, *base, "--baseline-config", shipped, "--per-rule")
    assert code == EXIT_OK
    assert "the two configs set every rule alike" in out
