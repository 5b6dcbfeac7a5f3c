"""``loopguard release`` / ``abort`` before any broker is reached (issue 43): what the trail
says of the run decides, bad flags are one line, ``--until`` counts forward; and the audit
trail's release rows and active runs as the command and quality read them."""

from __future__ import annotations

import pytest

from streams.audit.releases import active_runs, known_run, read_releases
from streams.audit.store import AuditStore
from streams.cli.main import main
from streams.cli.release_command import until_time
from streams.core.events import RELEASE_DETECTOR, Action, Decision
from streams.wire.avro import RunWatermark

NOW = 1_800_000_000_000


def mark(run_id: str, agent_id: str, seq: int, status: str) -> RunWatermark:
    return RunWatermark(
        run_id=run_id, agent_id=agent_id, gateway_id="gw", seq=seq, event_time=NOW,
        status=status, event_count=seq,
    )  # fmt: skip


@pytest.fixture
def trail(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(url) as store:
        store.migrate()
        store.record_progress(
            [
                mark("live-1", "etl", 7, "active"),
                mark("live-2", "etl", 3, "active"),
                mark("done", "etl", 9, "ended"),
                mark("other", "coder", 2, "active"),
            ]
        )
    return url


def run_cli(*argv: str) -> int:
    return main([*argv, "--broker", "kafka://127.0.0.1:1"])


def test_a_run_the_trail_does_not_know_or_that_is_over_is_one_line(trail, capsys) -> None:
    assert run_cli("release", "nope", "--reason", "x", "--db", trail) == 1
    assert capsys.readouterr().err == "loopguard release: no run 'nope' in the audit trail\n"
    assert run_cli("abort", "done", "--reason", "x", "--db", trail) == 1
    err = capsys.readouterr().err
    assert err == "loopguard abort: run 'done' is ended (nothing to abort)\n"
    assert run_cli("release", "--agent", "ghost", "--reason", "x", "--db", trail) == 1
    assert "no active run of agent 'ghost'" in capsys.readouterr().err


def test_bad_flags_are_usage_errors(trail, capsys) -> None:
    assert run_cli("release", "--reason", "x", "--db", trail) == 2
    assert "name one run (RUN) or --agent AGENT" in capsys.readouterr().err
    assert run_cli("release", "live-1", "--reason", "  ", "--db", trail) == 2
    assert (
        run_cli("release", "live-1", "--until", "2001-01-01", "--reason", "x", "--db", trail) == 2
    )
    assert "is not in the future" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # --calls and --until together
        run_cli("release", "live-1", "--calls", "3", "--until", "1h", "--reason", "x")
    assert exit_info.value.code == 2


def test_until_counts_a_duration_forward_and_takes_dates_as_given() -> None:
    assert until_time("30m", NOW) == NOW + 30 * 60_000
    assert until_time("2h", NOW) == NOW + 2 * 3_600_000
    assert until_time(str(NOW + 5), NOW) == NOW + 5
    assert until_time("2027-01-15T10:00Z", NOW) == 1_800_007_200_000


def test_the_trail_knows_active_runs_and_records_an_operator_decision_once(trail) -> None:
    with AuditStore(trail) as store:
        with store.engine.connect() as conn:
            assert [r.run_id for r in active_runs(conn, "etl")] == ["live-1", "live-2"]
            run = known_run(conn, "live-1")
            assert run is not None and (run.agent_id, run.status) == ("etl", "active")
        release = Decision(
            "live-1", "etl", "gw", 7, NOW, Action.WARN, RELEASE_DETECTOR, "info", 5, "read",
            "released by bob: fine", extra={
                "release_id": "r-1", "released_by": "bob", "source": "web", "scope": "run",
                "requested_at": NOW, "calls": 5, "released_detector": "generic_repeat",
                "released_action": "block", "released_seq": 6,
            },
        )  # fmt: skip
        store.record_decisions([release])
        store.record_decisions([release])  # redelivered: one row
        with store.engine.connect() as conn:
            (row,) = read_releases(conn, run_id="live-1")
    assert (row.release_id, row.command, row.released_by, row.source, row.calls) == (
        "r-1", "release", "bob", "web", 5,
    )  # fmt: skip
    assert (row.released_detector, row.released_action, row.released_seq) == (
        "generic_repeat", "block", 6,
    )  # fmt: skip
    assert row.applied_seq == 7 and row.decision_id == release.decision_id
