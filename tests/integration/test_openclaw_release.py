"""Issue 43's "done when" in one run of the REAL OpenClaw, on the demo's stack (tansu, SQLite,
gateway keys): an agent with ``warnings: "model"`` sees a warning in its tool result, is
blocked, an operator's ``loopguard release`` lets its next call through, and ``loopguard
quality`` on that audit trail shows the release under the rule that blocked it.

The harness is test_openclaw_plugin's (one headless ``openclaw agent --local`` turn whose
scripted model repeats one ``read``), run in a thread with ``--pause-after-refusal``: once
the model has seen the refused call it waits for a file before asking again, the operator's
time to act. The test releases the run with the CLI (signed with the operator key, as the
workers' keys file gives it), waits until the plugin has the release (its trace), then lets
the model go on.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_openclaw_plugin import (  # noqa: F401 (openclaw_runtime: the session fixture)
    FAST_LOOP,
    HARNESS_TIMEOUT_S,
    Turn,
    audit_until,
    check,
    one_run_end,
    openclaw_runtime,
    sqlite_only,
)
from test_operator_release import cli, wait_progress
from test_quality_releases import wait_for_rows

from streams.audit.releases import read_releases
from streams.core.events import RELEASE_DETECTOR, Action

pytestmark = pytest.mark.integration

HEARD = {"tools": {"loopDetection": {**FAST_LOOP["tools"]["loopDetection"], "warnings": "model"}}}
NOTE_START = "[loopguard] You have called read with the same arguments"
CONTENT = "hello from the loop"  # loop.txt, what an executed read returns
# As the demo and compose run it: the workers hold every gateway's key and an operator's.
PLUGIN_KEY = ("oc1", "openclaw-gateway-secret-4f1e9a")
PROBE_KEY = {"p1": "probe-gateway-secret-0b7d31"}
KEYS = {
    "gateways": {"openclaw-local": dict([PLUGIN_KEY]), "gw-test": PROBE_KEY},
    "operators": {"op1": "operator-secret-c2a95e0d"},
}
WAIT_S = 240.0  # the turn's steps on a loaded 2-core machine; the harness bounds the rest


def trace_records(path: Path) -> list[dict[str, Any]]:
    """The plugin's trace so far (a line being written is left for the next read)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            break
    return records


def trace_until(path: Path, wanted: Any, harness: threading.Thread) -> dict[str, Any] | None:
    """The first trace record ``wanted(record)`` accepts, once the plugin wrote it; None when
    the harness ended (or WAIT_S passed) without one."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = next((r for r in trace_records(path) if wanted(r)), None)
        if found is not None or not harness.is_alive() or time.monotonic() > deadline:
            return found
        harness.join(0.1)


@sqlite_only
def test_openclaw_agent_is_warned_blocked_released_and_quality_counts_the_release(
    openclaw_runtime: dict[str, Any],  # noqa: F811
    pipeline_factory: Any,
    migrated_db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keys = json.dumps(KEYS)
    pipeline = pipeline_factory(migrated_db_url, config=HEARD)
    pipeline.start_worker(LOOPGUARD_GATEWAY_KEYS=keys)  # signed events only, as the demo's
    try:
        pipeline.wait_ready(pipeline.client(signing_keys=PROBE_KEY), timeout=180.0)
    except Exception:
        print(pipeline.worker_logs())
        raise
    # OpenClaw's environment gives the plugin its key; the operator's CLI reads the keys file
    monkeypatch.setenv("LOOPGUARD_GATEWAY_KEY", ":".join(PLUGIN_KEY))
    monkeypatch.setenv("LOOPGUARD_GATEWAY_KEYS", keys)
    monkeypatch.setenv("E2E_DIR", str(tmp_path / "e2e"))
    trace, go = tmp_path / "e2e" / "plugin-trace.jsonl", tmp_path / "operator-done"

    outcome: dict[str, Any] = {}

    def harness() -> None:
        args = ["--max-tool-calls", "8", "--pause-after-refusal", str(go)]
        try:
            outcome["turn"] = Turn(pipeline, "local", args)
        except BaseException as error:  # noqa: BLE001 - pytest.fail's, to raise in the test
            outcome["error"] = error

    thread = threading.Thread(target=harness, daemon=True)
    thread.start()
    try:
        blocked = trace_until(trace, lambda r: r.get("outcome") == "blocked", thread)
        assert blocked is not None, "OpenClaw's loop was never blocked"
        run_id = blocked["runId"]
        wait_progress(pipeline, run_id)  # the trail knows the run: the CLI checks it
        why = "the file is still being written"
        capsys.readouterr()
        assert cli(pipeline, "release", run_id, "--reason", why, "--by", "alice", "--json") == 0
        sent = json.loads(capsys.readouterr().out)
        released = trace_until(
            trace,
            lambda r: r.get("event") == "decision" and r.get("detector") == RELEASE_DETECTOR,
            thread,
        )
        assert released is not None, "the plugin never received the release"
    finally:
        go.touch()  # the model goes on (and the harness ends) whatever happened above
        thread.join(HARNESS_TIMEOUT_S["local"])
    if "error" in outcome:
        raise outcome["error"]
    turn: Turn = outcome["turn"]
    assert turn.run_id() == run_id
    calls, records = turn["toolCalls"], turn["trace"]

    def in_openclaw() -> None:
        assert turn["plugin"]["connected"], "the plugin never connected to the broker"
        one_run_end(turn)
        assert calls["allowedFailOpen"] == 0 and calls["refusedFailClosed"] == 0, calls
        # the warning reached the model in a tool result, worded for it
        seen = turn["toolResultsSeenByModel"]
        assert any(t.startswith(CONTENT) and NOTE_START in t for t in seen), seen
        # warned, then blocked once (the model saw the refusal); the model waited for the
        # operator, and the release reached the plugin before the next call
        outcomes = [r for r in records if r.get("event") == "before_tool_call"]
        blocked_at = next(i for i, r in enumerate(outcomes) if r["outcome"] == "blocked")
        assert any(r.get("warnings") for r in outcomes[:blocked_at]), outcomes
        assert turn["modelPausedMs"] is not None, "the model never saw the refusal"
        assert records.index(released) < records.index(outcomes[blocked_at + 1])
        assert seen[blocked_at].startswith(NOTE_START), seen  # the block's note, not the file
        # the release let the next call through, and every call after it (its window)
        after = outcomes[blocked_at + 1 :]
        assert after and all(r["outcome"] == "allowed" for r in after), outcomes
        assert seen[blocked_at + 1].startswith(CONTENT), seen
        assert calls["blocked"] == 1 and calls["executed"] == calls["allowed"] >= 6, calls
        assert turn["abort"] is None and turn["openclaw"]["ok"], turn["openclaw"]

    check(turn, in_openclaw)
    rows = audit_until(pipeline, run_id, lambda ds: any(d.detector == RELEASE_DETECTOR for d in ds))
    block = next((d for d in rows if d.action is Action.BLOCK), None)

    def in_loopguard() -> None:
        assert block is not None, rows
        release = next(d for d in rows if d.detector == RELEASE_DETECTOR)
        assert release.extra["released_by"] == "alice", release.extra
        assert release.extra["released_detector"] == block.detector, release.extra
        assert not any(d.action is Action.ABORT for d in rows), rows

    check(turn, in_loopguard)
    wait_for_rows(pipeline, 1)
    with pipeline.store() as store, store.engine.connect() as conn:
        (row,) = read_releases(conn, run_id=run_id)
    assert (row.release_id, row.command, row.source) == (sent["release_id"], "release", "cli")

    # What the release teaches: loopguard quality on this trail
    capsys.readouterr()
    assert cli(pipeline, "quality", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    rule = doc["rules"][block.detector]
    assert (rule["stops"], rule["releases"], rule["operator_aborts"]) == (1, 1, 0), rule
    assert rule["release_rate"] == 1.0 and rule["agents"]["main"]["releases"] == 1, rule
    (label,) = doc["labels"]
    assert (label["run_id"], label["stuck"]) == (run_id, False) and "alice" in label["why"]
    print(f"openclaw release turn: {turn.seconds:.0f} s, paused {turn['modelPausedMs']} ms")
