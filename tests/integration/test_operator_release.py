"""An operator's release end to end on a real broker and worker (issue 43): a looping run is
blocked; ``loopguard release`` lets its next call through, the run draws only warnings for N
calls, then the guard resumes; the audit trail records who and why; replay of the run's
events, release included, reproduces the decisions."""

from __future__ import annotations

import json
import time

import pytest
from services import IN_TIME_BUDGET_MS
from test_pipeline import wait_for_audit

from streams.audit.releases import read_releases
from streams.cli.main import main
from streams.core.events import RELEASE_DETECTOR, Action
from streams.gateway.verdicts import RunAborted

pytestmark = pytest.mark.integration

CONFIG = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "historySize": 12,
            "warningThreshold": 3,
            "criticalThreshold": 5,
            "globalCircuitBreakerThreshold": 40,
            "abortAfterBlocks": 30,
        }
    }
}
ARGS = {"path": "/var/log/app.log"}
SAME = {"text": "no change"}


def loop_until_refused(run, limit: int = 40):
    """The same read with the same result until the gateway refuses one; that verdict."""
    for _ in range(limit):
        verdict = run.before_tool("read", ARGS)
        if not verdict.allowed:
            return verdict
        run.after_tool("read", ARGS, result=SAME)
    raise AssertionError("the loop was never blocked")


def cli(pipeline, *argv: str) -> int:
    return main(
        [
            *argv,
            "--broker",
            pipeline.broker.url,
            "--topic-prefix",
            pipeline.prefix,
            "--db",
            pipeline.db_url,
        ]
    )


def wait_progress(pipeline, run_id: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with pipeline.store() as store:
            if store.run_progress(run_id) is not None:
                return
        time.sleep(0.1)
    raise AssertionError(f"no progress of {run_id} in the trail")


def test_release_lets_the_next_call_through_warns_for_n_calls_then_guards(
    pipeline_factory, migrated_db_url, capsys
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG)
    client = pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)
    run = client.start_run("looper")
    refused = loop_until_refused(run)
    assert refused.blocked_by is not None and refused.blocked_by.action is Action.BLOCK
    wait_progress(pipeline, run.run_id)

    why = "it is polling a build"
    code = cli(pipeline, "release", run.run_id, "--calls", "6", "--reason", why, "--by", "alice", "--json")  # noqa: E501  # fmt: skip
    assert code == 0
    sent = json.loads(capsys.readouterr().out.strip())
    assert (sent["run_id"], sent["calls"], sent["released_by"]) == (run.run_id, 6, "alice")
    released = client.wait_for(
        run.run_id, lambda ds: any(d.detector == RELEASE_DETECTOR for d in ds)
    )
    release = next(d for d in released if d.detector == RELEASE_DETECTOR)
    assert release.action is Action.WARN and release.extra["released_by"] == "alice"
    assert release.extra["released_detector"] == refused.blocked_by.detector

    # The next call goes through, and the release's 6 calls draw warnings only.
    verdicts = []
    for _ in range(6):
        verdict = run.before_tool("read", ARGS)
        verdicts.append(verdict)
        run.after_tool("read", ARGS, result=SAME)
    assert all(v.allowed for v in verdicts), [v.reason for v in verdicts]
    # Then the guard resumes: the loop, counted from the release, is blocked again.
    resumed = loop_until_refused(run, limit=10)
    assert resumed.blocked_by is not None and "released" not in resumed.blocked_by.extra
    run.end()

    decided = client.decisions(run.run_id)
    softened = [d for d in decided if d.extra.get("released") == sent["release_id"]]
    assert softened and all(d.action is Action.WARN for d in softened)
    assert {d.extra["would_be"] for d in softened} == {"block"}

    # The trail: the release's row (who, why, the stop it lifted) and its decision.
    rows = wait_for_audit(pipeline, run.run_id, len(decided))
    assert any(r.detector == RELEASE_DETECTOR for r in rows)
    with pipeline.store() as store, store.engine.connect() as conn:
        (row,) = read_releases(conn, run_id=run.run_id)
    assert (row.command, row.released_by, row.calls) == ("release", "alice", 6)
    assert row.reason.startswith("released by alice: it is polling a build")
    assert (row.released_detector, row.released_action) == (refused.blocked_by.detector, "block")

    # `loopguard history` shows it; replay of the run's events (the release among them)
    # decides exactly what the worker decided.
    assert main(["history", run.run_id, "--db", pipeline.db_url]) == 0
    assert "released by alice" in capsys.readouterr().out
    config_file = pipeline.workdir / "release-config.json"
    config_file.write_text(json.dumps(CONFIG))
    code = cli(pipeline, "replay", "--config", str(config_file), "--run", run.run_id, "--json")
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0, report
    assert report["exit_code"] == 0


def test_release_of_an_unknown_run_is_one_line(pipeline_factory, migrated_db_url, capsys) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG)
    pipeline.setup()
    assert cli(pipeline, "release", "no-such-run", "--reason", "x") == 1
    err = capsys.readouterr().err
    assert err.startswith("loopguard release: no run 'no-such-run' in the audit trail")


def test_release_agent_reaches_each_active_run_and_abort_stops_one(
    pipeline_factory, migrated_db_url, capsys
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG)
    client = pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)
    runs = [client.start_run("fleet-a") for _ in range(2)]
    for run in runs:
        loop_until_refused(run)
        wait_progress(pipeline, run.run_id)
    assert cli(pipeline, "release", "--agent", "fleet-a", "--calls", "2", "--reason", "batch job", "--json") == 0  # noqa: E501  # fmt: skip
    sent = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(s["run_id"] for s in sent) == sorted(r.run_id for r in runs)
    assert {s["scope"] for s in sent} == {"agent"} and len({s["release_id"] for s in sent}) == 1
    for run in runs:
        client.wait_for(run.run_id, lambda ds: any(d.detector == RELEASE_DETECTOR for d in ds))
        assert run.before_tool("read", ARGS).allowed
        run.after_tool("read", ARGS, result=SAME)

    assert cli(pipeline, "abort", runs[0].run_id, "--reason", "runaway") == 0
    client.wait_for(runs[0].run_id, lambda ds: any(d.action is Action.ABORT for d in ds))
    with pytest.raises(RunAborted) as aborted:
        runs[0].before_tool("read", ARGS)
    assert aborted.value.decision.reason.endswith("runaway")
