"""``loopguard quality`` on a real broker and worker (issue 43): a looping run an operator
releases with ``loopguard release`` and another one an operator aborts with ``loopguard
abort`` are, in the audit trail the worker wrote, a labelled false and a labelled true stop
of the rule that stopped them; ``quality`` shows the release per rule and agent and, replaying
both runs from the events topic, what another threshold would have done to them."""

from __future__ import annotations

import json
import time

import pytest
from services import IN_TIME_BUDGET_MS
from test_operator_release import ARGS, SAME, cli, loop_until_refused, wait_progress

from streams.audit.releases import read_releases
from streams.core.events import ABORT_DETECTOR, RELEASE_DETECTOR

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


def wait_for_rows(pipeline, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with pipeline.store() as store, store.engine.connect() as conn:
            if len(read_releases(conn)) >= count:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} operator rows in the trail")
        time.sleep(0.1)


def test_quality_shows_the_releases_per_rule(pipeline_factory, migrated_db_url, capsys) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG)
    client = pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)
    released, aborted = client.start_run("builder"), client.start_run("poller")
    for run in (released, aborted):
        assert loop_until_refused(run).blocked_by is not None
        wait_progress(pipeline, run.run_id)
    reason = "the build takes a while"
    assert cli(pipeline, "release", released.run_id, "--reason", reason, "--by", "alice") == 0
    assert cli(pipeline, "abort", aborted.run_id, "--reason", "runaway", "--by", "bob") == 0
    for run, detector in ((released, RELEASE_DETECTOR), (aborted, ABORT_DETECTOR)):
        client.wait_for(run.run_id, lambda ds, d=detector: any(x.detector == d for x in ds))
    released.after_tool("read", ARGS, result=SAME)
    released.end()
    aborted.end("aborted")
    for run in (released, aborted):
        client.wait_processed(run.run_id, run.seq, timeout=30)
    wait_for_rows(pipeline, 2)  # the audit agent writes the operators' rows after the worker
    capsys.readouterr()

    config_file = pipeline.workdir / "quality-config.json"
    config_file.write_text(json.dumps(CONFIG))
    code = cli(pipeline, "quality", "--from-topic", "--config", str(config_file), "--json")
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    rule = doc["rules"]["generic_repeat"]
    assert (rule["stops"], rule["releases"], rule["operator_aborts"]) == (2, 1, 1)
    assert rule["release_rate"] == 0.5
    assert rule["agents"]["builder"]["releases"] == 1
    assert rule["agents"]["poller"]["operator_aborts"] == 1
    labels = {label["run_id"]: label for label in doc["labels"]}
    assert labels[released.run_id]["stuck"] is False
    assert labels[aborted.run_id]["stuck"] is True
    assert "alice" in labels[released.run_id]["why"]
    (what_if,) = doc["threshold_what_if"]
    by_delta = {v["delta"]: v for v in what_if["variants"]}
    assert by_delta[0]["threshold"] == 5
    # replayed from the topic, release and abort in their places: as recorded, both stopped
    assert (by_delta[0]["false_stops_kept"], by_delta[0]["true_stops_caught"]) == (1, 1)

    assert cli(pipeline, "quality") == 0
    out = capsys.readouterr().out
    first = next(line for line in out.splitlines() if line.startswith("generic_repeat"))
    assert first.split() == ["generic_repeat", "(all)", "2", "1", "50%", "1"], out
