"""The commands a newcomer types first, as typed (a subprocess of the installed ``loopguard``):
exit code and first line of output; none needs a broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams.cli.times import format_ms, parse_time

LOOPGUARD = str(Path(sys.executable).parent / "loopguard")
UNREACHABLE = "kafka://127.0.0.1:1"


def loopguard(*args: str, cwd: Path | None = None, timeout: float = 60) -> tuple[int, str, str]:
    done = subprocess.run(
        [LOOPGUARD, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def test_version() -> None:
    from importlib import metadata

    code, out, _ = loopguard("--version")
    assert code == 0 and first_line(out) == f"loopguard {metadata.version('loopguard')}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("0", 0),
        ("30m", 1_800_000_000_000 - 30 * 60_000),
        ("1h", 1_800_000_000_000 - 3_600_000),
        ("2d", 1_800_000_000_000 - 2 * 86_400_000),
        ("2023-11-14", 1_699_920_000_000),
        ("2023-11-14T22:13:20", 1_700_000_000_000),
        ("2023-11-14T22:13:20Z", 1_700_000_000_000),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
    ],
)
def test_human_times(text: str, expected: int) -> None:
    assert parse_time(text, now_ms=1_800_000_000_000) == expected


def test_a_bad_time_names_the_forms() -> None:
    with pytest.raises(ValueError, match="is not a time: expected a duration"):
        parse_time("last tuesday")
    assert format_ms(1_700_000_000_000) == "2023-11-14 22:13:20Z" and format_ms(None) == "-"


def test_a_bad_time_on_the_command_line_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = loopguard("runs", "--db", f"sqlite:///{tmp_path}/a.db", "--since", "soon")
    assert code == 2 and "argument --since: 'soon' is not a time" in err


def test_migrate_refuses_a_missing_folder_in_one_line(tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "dir"
    code, out, err = loopguard("migrate", "--db", f"sqlite:///{target}/a.db")
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"loopguard migrate: folder {target} does not exist (create it first, or give --db "
        "a file in an existing folder)"
    ]
    assert not (tmp_path / "nonexistent").exists()


def test_migrate_creates_the_default_trail_in_a_fresh_folder(tmp_path: Path) -> None:
    env_free = {k: v for k, v in os.environ.items() if k != "LOOPGUARD_DB_URL"}
    done = subprocess.run(
        [LOOPGUARD, "migrate"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env_free,
    )
    assert done.returncode == 0, done.stderr
    assert first_line(done.stdout) == "audit schema is at head on sqlite:///loopguard-data/audit.db"
    assert (tmp_path / "loopguard-data" / "audit.db").is_file()


@pytest.mark.parametrize("command", ["runs", "migrate", "incidents"])
def test_a_postgres_url_gets_a_hint_to_postgresql(command: str) -> None:
    code, out, err = loopguard(command, "--db", "postgres://lg:secret@127.0.0.1:1/audit")
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"loopguard {command}: error: unsupported audit database 'postgres': write "
        "postgresql://... (postgres:// is libpq's alias; SQLAlchemy knows PostgreSQL as "
        "postgresql://)"
    ]


def test_migrate_help_describes_it() -> None:
    code, out, _ = loopguard("migrate", "--help")
    assert code == 0 and "Bring the audit trail's schema to the latest revision" in out


def test_demo_help_names_all_six_runs() -> None:
    from streams.devtools.demo_runs import SCENARIOS

    code, out, _ = loopguard("demo", "--help")
    assert code == 0 and "--stop" in out and "--keep-running" in out
    text = " ".join(out.split())
    for phrase in ("ordinary work", "ping-pong", "compaction", "consecutive_errors"):
        assert phrase in text
    assert "error_repeat" in text and "compaction_storm" in text and len(SCENARIOS) == 6


def test_demo_with_a_bad_db_url_starts_nothing(tmp_path: Path) -> None:
    code, out, err = loopguard("demo", "--db", "notaurl", cwd=tmp_path)
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "loopguard demo: --db notaurl is not a database URL (e.g. sqlite:///audit.db)"
    ]
    assert list(tmp_path.iterdir()) == []  # no broker was started: no log, no data folder


def test_demo_stop_without_a_kept_demo(tmp_path: Path) -> None:
    code, out, err = loopguard("demo", "--stop", cwd=tmp_path)
    assert code == 1 and out == ""
    assert first_line(err) == (
        "loopguard demo: nothing to stop: no loopguard-data/demo.pid here (run it from the "
        "demo's folder)"
    )


def test_doctor_on_an_unreachable_broker(tmp_path: Path) -> None:
    code, out, err = loopguard(
        "doctor", "--broker", UNREACHABLE, "--db", f"sqlite:///{tmp_path}/none.db", cwd=tmp_path
    )
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"FAIL  broker    {UNREACHABLE} does not answer")
    assert [line.split()[:2] for line in lines] == [
        ["FAIL", "broker"],
        ["skip", "profile"],
        ["skip", "topics"],
        ["FAIL", "database"],
        ["ok", "config"],
        ["skip", "lag"],
    ]
    assert first_line(err) == "loopguard doctor: 2 check(s) failed: broker, database"
    assert list(tmp_path.iterdir()) == []  # a check creates nothing


def test_doctor_json_and_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"tools": {"loopDetection": {"warningThreshold": "many"}}}')
    db = f"sqlite:///{tmp_path}/a.db"
    assert loopguard("migrate", "--db", db)[0] == 0
    code, out, _ = loopguard(
        "doctor", "--broker", UNREACHABLE, "--db", db, "--config", str(bad), "--json"
    )
    assert code == 1
    checks = {row["check"]: row for row in map(json.loads, out.splitlines())}
    assert list(checks) == ["broker", "profile", "topics", "database", "config", "lag"]
    assert checks["database"]["state"] == "ok" and checks["database"]["ok"] is True
    assert checks["config"]["state"] == "FAIL" and str(bad) in checks["config"]["detail"]


def test_tail_on_an_unreachable_broker_is_one_line() -> None:
    code, out, err = loopguard("tail", "--broker", UNREACHABLE, "--timeout", "1")
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"loopguard tail: broker {UNREACHABLE}: ")


def test_replay_prints_no_internal_log_lines(tmp_path: Path) -> None:
    from core_helpers import Run, loop_guard

    from streams.replay.event_file import write_event_lines

    run = Run(loop_guard(enabled=True), "run-log", "coder", "gw-1", start_time=1_700_000_000_000)
    run.compaction()  # the core logs "post-compaction guard armed" at INFO
    for _ in range(3):
        run.cycle("web_fetch", {"url": "u"}, error="timeout")
    events = tmp_path / "events.jsonl"
    with events.open("w") as out:
        write_event_lines(run.events, out)
    db = f"sqlite:///{tmp_path}/a.db"
    assert loopguard("migrate", "--db", db)[0] == 0
    code, out, err = loopguard("replay", "--from-file", str(events), "--db", db, "--json")
    assert code in (0, 3), err  # the empty trail diverges from the core; that is not the point
    assert err == ""
    assert len(out.splitlines()) == 1 and json.loads(out)["exit_code"] == code


def test_demo_stop_ends_exactly_the_processes_its_pidfile_names(tmp_path: Path) -> None:
    from streams.devtools.demo_services import LeftRunning

    (tmp_path / "loopguard-data").mkdir()
    started = [
        subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in ("worker", "broker")
    ]
    try:
        LeftRunning(
            pids={"worker": started[0].pid, "broker": started[1].pid},
            marks={"worker": "sleep", "broker": "sleep"},
            broker_url="kafka://127.0.0.1:1",
            status_url="http://127.0.0.1:1/status",
        ).save(tmp_path / "loopguard-data" / "demo.pid")
        code, out, _ = loopguard("demo", "--stop", cwd=tmp_path)
        assert code == 0
        assert first_line(out) == (
            f"stopped the demo's worker (pid {started[0].pid}), broker (pid {started[1].pid})"
        )
        assert [p.wait(timeout=30) for p in started] == [-15, -15]  # SIGTERM, as asked
        assert not (tmp_path / "loopguard-data" / "demo.pid").exists()
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_demo_stop_never_signals_a_process_that_reused_a_pid(tmp_path: Path) -> None:
    from streams.devtools.demo_services import LeftRunning

    (tmp_path / "loopguard-data").mkdir()
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        LeftRunning(  # the pid is alive, but it is not a tansu broker
            pids={"worker": other.pid, "broker": other.pid},
            marks={"worker": "streams.cli.main", "broker": "tansu"},
            broker_url="kafka://127.0.0.1:1",
            status_url="http://127.0.0.1:1/status",
        ).save(tmp_path / "loopguard-data" / "demo.pid")
        code, out, _ = loopguard("demo", "--stop", cwd=tmp_path)
        assert code == 0
        assert first_line(out) == "nothing was running any more; removed the demo's pidfile"
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
