"""The TypeScript gateway client (clients/typescript, ``@loopguard/client``) against a real worker.

A session fixture builds the package (``npm ci`` when node_modules is missing, then
``npm run build:test``); node and npm missing is a failure, not a skip. The test starts a worker
on the parametrised broker and runs ``test/drive-loop.ts`` (compiled to
``build/test/drive-loop.js``): one agent repeating a no-progress call through the TS client, with
a generous wait budget, obeying every verdict, while malformed messages are published to the
control topic in the middle of the run. Its JSON report is checked here against the pure core,
run over the very events the TS client published (read back from the events topic).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from node_tools import build_lock, node_and_npm, run_step, stale
from services import ENABLED, IN_TIME_BUDGET_MS
from test_pipeline import by_key, expected_decisions, wait_for_audit

from streams.audit.store import AuditStore
from streams.core.events import Action, Decision, ToolCall, ToolResult
from streams.devtools.embedded_broker import tansu_binary
from streams.wire.avro import decode_decision, decode_event

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TS_DIR = ROOT / "clients" / "typescript"
DRIVER = TS_DIR / "build" / "test" / "drive-loop.js"
VETO = '{"details": {"status": "blocked", "deniedReason": "tool-loop"}}'


@pytest.fixture(scope="session")
def ts_driver() -> Path:
    """The TS package built (dist/ and build/test/); fails loudly without Node 20+ and npm."""
    _, npm = node_and_npm("the TypeScript client tests")
    sources = ("src", "test", "package.json", "tsconfig.json", "tsconfig.test.json")
    with build_lock():  # one xdist worker builds, the others find it built
        if not (TS_DIR / "node_modules").is_dir():
            run_step([npm, "ci", "--no-audit", "--no-fund"], TS_DIR, timeout=600)
        if stale(DRIVER, *(TS_DIR / name for name in sources), TS_DIR.parents[1] / "schemas"):
            run_step([npm, "run", "build:test"], TS_DIR, timeout=600)
    assert DRIVER.exists(), f"{DRIVER} not built"
    return DRIVER


@pytest.fixture
def audit_db_url(tmp_path: Path) -> str:
    """SQLite only: the audit trail's dialects are covered by the Python pipeline tests."""
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(url) as store:
        store.migrate()
    return url


def drive(driver: Path, pipeline: Any, **options: Any) -> dict[str, Any]:
    cmd = ["node", str(driver), "--brokers", pipeline.broker.bootstrap]
    cmd += ["--prefix", pipeline.prefix]
    for name, value in options.items():
        cmd += [f"--{name.replace('_', '-')}", str(value)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=os.environ)
    if done.returncode != 0:
        print(pipeline.worker_logs())
        pytest.fail(f"drive-loop failed ({done.returncode}):\n{done.stderr[-6000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def events_on_topic(bootstrap: str, topic: str, run_id: str, count: int) -> list[bytes]:
    """The values keyed by ``run_id`` on the events topic, in order (one partition per run)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, consumer_timeout_ms=1000)
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    found: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(found) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            found += [r.value for r in records if r.key == run_id.encode()]
    consumer.close()
    return found


def test_typescript_client_is_warned_blocked_in_time_and_aborted(
    ts_driver: Path, pipeline_factory, audit_db_url: str
) -> None:
    pipeline = pipeline_factory(audit_db_url, config=ENABLED)
    pipeline.start_worker()
    pipeline.wait_ready(pipeline.client())
    report = drive(ts_driver, pipeline, wait_budget_ms=IN_TIME_BUDGET_MS, junk_after=5)
    run_id = report["runId"]

    # What the TS client published is on the events topic, byte for byte, in order.
    published = [bytes.fromhex(h) for h in report["events"]]
    topic = pipeline.settings.topics.events
    assert events_on_topic(pipeline.broker.bootstrap, topic, run_id, len(published)) == published
    events = [decode_event(data) for data in published]
    assert [e.envelope.seq for e in events] == list(range(1, len(events) + 1))

    # The worker decided exactly what the pure core decides on those events.
    expected = expected_decisions(events)
    received: list[Decision] = [decode_decision(bytes.fromhex(h)) for h in report["decisions"]]
    assert by_key(received) == by_key(expected)
    actions = [d.action for d in expected]
    assert actions.index(Action.WARN) < actions.index(Action.BLOCK) < actions.index(Action.ABORT)
    assert actions[-1] is Action.ABORT and actions.count(Action.ABORT) == 1
    assert report["aborted"] and events[-1].status == "aborted"

    # In time: every call's verdict holds exactly the decisions drawn by the events published
    # since the previous call (the watermark wait), never one cycle late.
    calls = report["calls"]
    assert not any(c["timedOut"] for c in calls)
    assert report["stats"]["waitTimeouts"] == 0
    previous = 0
    for call in calls:
        due = [d for d in expected if previous < d.seq <= call["seqBefore"]]
        previous = call["seqBefore"]
        aborts = [d.decision_id for d in due if d.action is Action.ABORT]
        blocks = [d.decision_id for d in due if d.action is Action.BLOCK]
        warns = [d.decision_id for d in due if d.action is Action.WARN]
        assert call["aborted"] == (aborts[0] if aborts else None), call
        if aborts:
            continue
        assert call["blockedBy"] == (blocks[-1] if blocks else None), call
        assert call["allowed"] == (not blocks), call
        assert call["warnings"] == warns, call
    assert calls[-1]["aborted"] and not any(c["aborted"] for c in calls[:-1])
    refused = [c for c in calls if c["blockedBy"]]
    assert refused, "no call was blocked"

    # A refused call is published as a ToolCall followed by the loop veto as its result.
    by_seq = {e.envelope.seq: e for e in events}
    for call in refused:
        tool_call, outcome = by_seq[call["seqBefore"] + 1], by_seq[call["seqBefore"] + 2]
        assert isinstance(tool_call, ToolCall) and isinstance(outcome, ToolResult)
        assert outcome.result_json == VETO

    # Malformed control messages: skipped with a warning, enforcement carried on past them.
    assert len(report["junk"]) == 3
    assert report["stats"]["skippedControl"] == len(report["junk"])
    skipped = [w for w in report["warnings"] if "skipping undecodable control message" in w]
    assert len(skipped) == len(report["junk"]), report["warnings"]
    assert report["stats"]["duplicates"] == 0
    assert report["watermark"] == len(events)

    # The audit trail holds the rows, and the worker is still up after the junk.
    rows = wait_for_audit(pipeline, run_id, len(expected))
    assert by_key(rows) == by_key(expected)
    assert all(worker.alive for worker in pipeline.workers)


def test_typescript_integration_suite_against_a_real_worker(
    ts_driver: Path, pipeline_factory, audit_db_url: str
) -> None:
    """clients/typescript/test/integration.test.ts with a real worker serving its topics
    (schema announcement, byte-identical events, obeying the worker, watermarks), and on
    tansu its broker-restart test against a tansu of its own."""
    pipeline = pipeline_factory(audit_db_url, config=ENABLED)
    pipeline.start_worker()
    pipeline.wait_ready(pipeline.client())
    env = {
        **os.environ,
        "LOOPGUARD_TEST_BOOTSTRAP": pipeline.broker.bootstrap,
        "LOOPGUARD_TEST_TOPIC_PREFIX": pipeline.prefix,
        "LOOPGUARD_TEST_WORKER": "1",
        "LOOPGUARD_TEST_EXPECT_WATERMARKS": "1",
        "LOOPGUARD_TEST_WAIT_BUDGET_MS": str(IN_TIME_BUDGET_MS),
    }
    env.pop("LOOPGUARD_TEST_TANSU", None)
    if pipeline.broker.profile != "kafka":
        env["LOOPGUARD_TEST_TANSU"] = str(tansu_binary())
    test_file = ts_driver.parent / "integration.test.js"
    cmd = ["node", "--test", "--test-reporter=spec", str(test_file)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=TS_DIR)
    if done.returncode != 0:
        print(pipeline.worker_logs())
        pytest.fail(f"{' '.join(cmd)} failed:\n{done.stdout[-8000:]}\n{done.stderr[-4000:]}")
    print(done.stdout[-3000:])
    summary = dict(re.findall(r"^ℹ (\w+) (\d+)$", done.stdout, re.MULTILINE))
    assert summary.get("fail") == "0" and int(summary.get("pass", "0")) >= 3, done.stdout


def test_a_signing_typescript_gateway_is_guarded_by_a_worker_that_requires_keys(
    ts_driver: Path, pipeline_factory, audit_db_url: str
) -> None:
    """Issue 40 across languages: the TS client's events, signed through kafkajs's headers, are
    taken by a worker with keys; its decisions, signed for gw-ts-it, are obeyed in time."""
    secret = "typescript-gateway-secret-0123"
    keys = {"gateways": {"gw-ts-it": {"t1": secret}, "gw-test": {"p1": secret + "-py"}}}
    pipeline = pipeline_factory(audit_db_url, config=ENABLED)
    pipeline.start_worker(LOOPGUARD_GATEWAY_KEYS=json.dumps(keys))
    pipeline.wait_ready(pipeline.client(signing_keys={"p1": secret + "-py"}))
    cmd = ["node", str(ts_driver), "--brokers", pipeline.broker.bootstrap]
    cmd += ["--prefix", pipeline.prefix, "--wait-budget-ms", str(IN_TIME_BUDGET_MS)]
    env = {**os.environ, "LOOPGUARD_GATEWAY_KEY": f"t1:{secret}"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-6000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    events = [decode_event(bytes.fromhex(h)) for h in report["events"]]
    expected = expected_decisions(events)
    received = [decode_decision(bytes.fromhex(h)) for h in report["decisions"]]
    assert by_key(received) == by_key(expected)
    assert report["aborted"] and report["stats"]["waitTimeouts"] == 0
    assert report["stats"]["forged"] == 0
    # every TS event verified: none dead-lettered (the driver's control-topic junk may be)
    assert f"dead-lettered {pipeline.settings.topics.events}" not in pipeline.worker_logs(10**7)
