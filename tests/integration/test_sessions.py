"""Session scope through a real worker (issue 17): two runs of one session, keyed by the
session id, the loop's counts carried from the first run to the second, with decisions equal
to the pure core's; a heartbeat run of the session starts fresh; the runs' states sit on the
session's partition of the changelog, and a restarted worker still seeds from them."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.partitioner.default import murmur2
from pipeline_replay import by_run_and_seq, replay_pipeline
from services import IN_TIME_BUDGET_MS
from test_pipeline import wait_for_audit
from test_typescript_client import drive
from test_typescript_client import ts_driver as ts_driver  # a fixture, used by name

from streams.core.engine import LoopGuard
from streams.core.events import Action
from streams.core.fleet import fleet_from_document
from streams.gateway.client import GatewayClient, GatewayRun, RunAborted
from streams.wire.avro import decode_decision, decode_event

pytestmark = pytest.mark.integration

CONFIG = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 5,
            "criticalThreshold": 8,
            "scope": "session",
        }
    }
}


def partition_of(key: str, partitions: int = 4) -> int:
    """The partition the Java/Python/kafkajs default partitioner gives ``key``."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def run_id_elsewhere(session: str) -> str:
    """A run id that hashes to another partition than its session, so a state written by the
    run id (the bug these tests catch) cannot land on the session's partition by chance."""
    while partition_of(run_id := uuid.uuid4().hex) == partition_of(session):
        pass
    return run_id


def loop(run: GatewayRun, cycles: int, path: str = "notes.md", result: dict | None = None) -> None:
    """The same read with the same answer, obeying loopguard until it aborts the run."""
    for _ in range(cycles):
        try:
            verdict = run.before_tool("read", {"path": path})
        except RunAborted:
            return
        if verdict.allowed:
            run.after_tool("read", {"path": path}, result=result or {"text": "same"})


def read_topic(bootstrap: str, topic: str, want, timeout: float = 30.0) -> list:
    """Records of ``topic`` (all partitions, from the start) until ``want(records)``."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, consumer_timeout_ms=500)
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    records: list = []
    deadline = time.monotonic() + timeout
    while not want(records) and time.monotonic() < deadline:
        records.extend(consumer)
    consumer.close()
    return records


def test_a_loop_split_over_two_runs_of_a_session_is_blocked(
    pipeline_factory, migrated_db_url, capsys
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG, partitions=4)
    client: GatewayClient = pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)
    session = f"sess-{uuid.uuid4().hex[:8]}"
    first = client.start_run(
        "coder", run_id=run_id_elsewhere(session), session_id=session, trigger="user"
    )
    loop(first, 5)  # four earlier identical calls at most: no decision in this run
    first.end()
    # A restarted worker recovers both tables from their changelogs and still seeds.
    pipeline.workers.pop().stop()
    pipeline.start_worker()
    pipeline.wait_ready(client)
    second = client.start_run(
        "coder", run_id=run_id_elsewhere(session), session_id=session, trigger="compaction"
    )
    loop(second, 8)
    second.end()
    fresh = client.start_run("coder", session_id=session, trigger="heartbeat")
    loop(fresh, 5)
    fresh.end()

    core = LoopGuard(fleet_from_document(CONFIG))
    expected = list(core.process_all([*first.events, *second.events, *fresh.events]))
    wanted = sum(d.run_id == second.run_id for d in expected)
    client.wait_for(second.run_id, lambda ds: len(ds) >= wanted, timeout=30)
    received = {run.run_id: client.decisions(run.run_id) for run in (first, second, fresh)}
    assert by_run_and_seq([d for ds in received.values() for d in ds]) == by_run_and_seq(expected)
    assert received[first.run_id] == [] and received[fresh.run_id] == []
    actions = [d.action for d in received[second.run_id]]
    assert actions[:3] == [Action.WARN] * 3 and Action.BLOCK in actions

    # `loopguard replay --run` of the second run alone reads its session's first run too, so
    # it is seeded as the worker seeded it and matches the audit trail.
    wait_for_audit(pipeline, second.run_id, wanted)
    report = replay_pipeline(pipeline, capsys, "--run", second.run_id)
    [run_report] = report["runs"]
    assert run_report["status"] == "match" and run_report["replayed"] == wanted

    # Keyed by the session: every event of the three runs on one partition, and the runs'
    # states on the same partition of the runs changelog (not murmur2 of the run id).
    topics = pipeline.settings.topics
    count = len(first.events) + len(second.events) + len(fresh.events)
    ours = lambda rs: [r for r in rs if r.key == session.encode()]  # noqa: E731
    events = ours(
        read_topic(pipeline.broker.bootstrap, topics.events, lambda rs: len(ours(rs)) >= count)
    )
    assert len(events) == count and len({r.partition for r in events}) == 1
    run_keys = {run.run_id.encode() for run in (first, second, fresh)}
    mine = lambda rs: [r for r in rs if r.key in run_keys]  # noqa: E731
    changelog = mine(
        read_topic(
            pipeline.broker.bootstrap,
            f"{pipeline.prefix}-runs-changelog",
            lambda rs: {r.key for r in mine(rs)} == run_keys,
        )
    )
    assert {r.key for r in changelog} == run_keys
    assert {r.partition for r in changelog} == {events[0].partition} == {partition_of(session)}


def test_a_typescript_run_goes_on_with_a_python_run_of_its_session(
    ts_driver, pipeline_factory, migrated_db_url
) -> None:
    """Both clients key a session's events alike (kafkajs and kafka-python, murmur2), so the
    TypeScript client's run lands where the Python run's state is, and is seeded from it."""
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG, partitions=4)
    client = pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)
    session = f"sess-ts-{uuid.uuid4().hex[:8]}"
    first = client.start_run("agent-ts", session_id=session, trigger="user")
    loop(first, 5, path="/same", result={"content": "same"})  # drive-loop's very call
    first.end()
    report = drive(
        ts_driver, pipeline, wait_budget_ms=IN_TIME_BUDGET_MS, junk_after=10**6, session_id=session
    )
    events = [decode_event(bytes.fromhex(h)) for h in report["events"]]
    assert {e.envelope.session_id for e in events} == {session}
    core = LoopGuard(fleet_from_document(CONFIG))
    expected = [
        d for d in core.process_all([*first.events, *events]) if d.run_id == report["runId"]
    ]
    received = [decode_decision(bytes.fromhex(h)) for h in report["decisions"]]
    assert by_run_and_seq(received) == by_run_and_seq(expected)
    assert (received[0].seq, received[0].count) == (2, 5)  # its first call goes on from five
    assert report["aborted"]

    topics = pipeline.settings.topics
    count = len(first.events) + len(events)
    ours = lambda rs: [r for r in rs if r.key == session.encode()]  # noqa: E731
    keyed = ours(
        read_topic(pipeline.broker.bootstrap, topics.events, lambda rs: len(ours(rs)) >= count)
    )
    assert len(keyed) == count and len({r.partition for r in keyed}) == 1
    run_key = report["runId"].encode()
    mine = lambda rs: [r for r in rs if r.key == run_key]  # noqa: E731
    changelog = mine(
        read_topic(pipeline.broker.bootstrap, f"{pipeline.prefix}-runs-changelog", mine)
    )
    assert changelog and {r.partition for r in changelog} == {keyed[0].partition}


def test_expired_session_runs_leave_tombstones_on_their_sessions_partition(
    pipeline_factory, migrated_db_url
) -> None:
    """The worker drops an ended run that is no longer its session's latest (and the session
    entry with the last one): the deletes go to the session's changelog partition too, where
    the states are, or a restarted worker would recover dropped runs."""
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG, partitions=4)
    pipeline.start_worker(LOOPGUARD_RUN_IDLE_TTL="1", LOOPGUARD_EXPIRY_INTERVAL="1")
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    pipeline.wait_ready(client)
    session = f"sess-x-{uuid.uuid4().hex[:8]}"
    runs = []
    for trigger in ("user", "compaction"):
        run = client.start_run(
            "coder", run_id=run_id_elsewhere(session), session_id=session, trigger=trigger
        )
        loop(run, 2)
        run.end()
        runs.append(run)
    first_key = runs[0].run_id.encode()
    tombstone = lambda rs: [r for r in rs if r.key == first_key and r.value is None]  # noqa: E731
    records = read_topic(
        pipeline.broker.bootstrap, f"{pipeline.prefix}-runs-changelog", tombstone, timeout=60
    )
    states = [r for r in records if r.key == first_key]
    assert tombstone(records), pipeline.worker_logs()
    assert len({r.partition for r in states}) == 1  # the state and its tombstone together
    keyed = read_topic(
        pipeline.broker.bootstrap,
        pipeline.settings.topics.events,
        lambda rs: any(r.key == session.encode() for r in rs),
    )
    assert {r.partition for r in keyed if r.key == session.encode()} == {states[0].partition}
    assert states[0].partition == partition_of(session) != partition_of(runs[0].run_id)
