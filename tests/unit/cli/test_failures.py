"""Commands fail fast, in one line, and read-only ones never create files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from core_helpers import Run, loop_guard

from streams.cli.common import EXIT_ERROR, EXIT_USAGE
from streams.cli.main import EXIT_BROKEN_PIPE, main

UNREACHABLE = "kafka://127.0.0.1:1"


def one_line_error(capsys) -> str:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("command", ["runs", "history"])
def test_a_missing_sqlite_trail_is_named_and_nothing_is_created(
    command, tmp_path: Path, capsys
) -> None:
    url = f"sqlite:///{tmp_path}/not/there/audit.db"
    args = [command, "--db", url] + (["run-1"] if command == "history" else [])
    assert main(args) == EXIT_ERROR
    assert "no audit trail at" in one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_an_unmigrated_trail_says_to_migrate(db_url: str, capsys) -> None:
    if db_url.startswith("sqlite"):
        Path(db_url.removeprefix("sqlite:///")).touch()
    assert main(["runs", "--db", db_url]) == EXIT_ERROR
    assert "run `loopguard migrate --db" in one_line_error(capsys)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_closed_pipe_is_quiet(audit_store) -> None:
    run = Run(loop_guard(enabled=True, warningThreshold=3, criticalThreshold=5), "run-pipe")
    for _ in range(800):  # after the abort, every further call is refused with a decision
        run.cycle("grep", {"q": "x"}, {"text": "none"})
    audit_store.record_decisions(run.decisions)
    assert len(run.decisions) > 700  # far more text than a pipe buffer holds
    url = audit_store.url.render_as_string(hide_password=False)
    done = subprocess.run(
        f"{sys.executable} -m streams.cli.main history run-pipe --db '{url}' | head -1; "
        'echo "exit ${PIPESTATUS[0]}"',
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        executable="/bin/bash",
    )
    first, status = done.stdout.splitlines()
    assert first.startswith("run run-pipe (agent agent-1, gateway gw-1): ")
    assert done.stderr == ""
    assert status == f"exit {EXIT_BROKEN_PIPE}"


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "--since", "0"],
        ["export", "--out", "{tmp}/out.jsonl"],
        ["config", "show"],
        ["config", "rm", "agent-1"],
    ],
)
def test_an_unreachable_broker_fails_fast_in_one_line(args, tmp_path: Path) -> None:
    """Commands give up after their own 3 s (cli.common.COMMAND_BOOTSTRAP_TIMEOUT_MS), whatever
    a long-lived client's setting says: with an hour in LOOPGUARD_BOOTSTRAP_TIMEOUT_MS, a
    command that honoured it would still be waiting when the subprocess guard ends it."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args] + ["--broker", UNREACHABLE]
    if args[0] == "replay":
        argv += ["--db", f"sqlite:///{tmp_path}/audit.db"]
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard, far below the hour a long-lived client would wait
        cwd=tmp_path,
        env={**os.environ, "LOOPGUARD_BOOTSTRAP_TIMEOUT_MS": "3600000"},
    )
    assert done.returncode == EXIT_ERROR
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "127.0.0.1:1" in lines[0] and "--broker" in lines[0], lines
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_worker_refuses_a_bad_config_before_it_touches_the_broker(tmp_path: Path) -> None:
    """The config is checked first: with an unreachable broker, the one line is about the
    config's typo, not the broker, and no database file is created either."""
    config = tmp_path / "fleet.json5"
    config.write_text("{tools: {loopDetecton: {enabled: true}}}")
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "worker", "--broker", UNREACHABLE,
         "--config", str(config), "--db", f"sqlite:///{tmp_path}/audit.db"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == EXIT_USAGE, done.stderr
    assert len(lines) == 1 and lines[0].startswith("loopguard worker: invalid config: "), lines
    assert 'did you mean "loopDetection"?' in lines[0]
    assert [p.name for p in tmp_path.iterdir()] == ["fleet.json5"]
