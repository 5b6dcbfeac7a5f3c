"""End to end through the real broker: gateway client → events topic → worker → control topic
and SQL audit trail, on SQLite and PostgreSQL. The expected decisions are always computed by
running the pure core over the very events the gateway published, so the streaming pipeline
must agree with the core decision for decision."""

from __future__ import annotations

import io
import json
import random
import time

import fastavro
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from services import ENABLED, IN_TIME_BUDGET_MS, Pipeline

from streams.core.engine import LoopGuard, core_build
from streams.core.events import (
    Action,
    CompactionRetry,
    Decision,
    Envelope,
    ToolCall,
    ToolResult,
    event_to_dict,
)
from streams.core.fleet import fleet_from_document
from streams.gateway.client import GatewayClient, GatewayRun, RunAborted
from streams.kafka.schema_topic import publish_schema
from streams.wire.avro import decode_dead_letter, encode_event, event_schema_json
from streams.wire.schema_registry import SchemaRegistry

pytestmark = pytest.mark.integration


def expected_decisions(events, config=ENABLED) -> list[Decision]:
    return list(LoopGuard(fleet_from_document(config)).process_all(events))


def wait_for_count(client: GatewayClient, run_id: str, count: int, timeout: float = 30.0):
    return client.wait_for(run_id, lambda ds: len(ds) >= count, timeout=timeout)


def wait_for_audit(pipeline: Pipeline, run_id: str, count: int, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    with pipeline.store() as store:
        while True:
            rows = store.history(run_id)
            if len(rows) >= count or time.monotonic() > deadline:
                return rows
            time.sleep(0.1)


def by_key(decisions) -> list[dict]:
    return sorted((d.to_dict() for d in decisions), key=lambda d: (d["seq"], d["detector"]))


def drive_ping_pong(run: GatewayRun, client: GatewayClient, cycles: int = 80) -> bool:
    """Alternate two no-progress calls, obeying loopguard; True once the run was aborted."""
    same = {"details": {"status": "failed", "exitCode": 2, "aggregated": "boom"}}
    for step in range(cycles):
        tool, args = ("read_file", {"path": "a.cfg"}) if step % 2 else ("exec", {"cmd": "make"})
        try:
            verdict = run.before_tool(tool, args)
        except RunAborted:
            return True
        if verdict.allowed:
            run.after_tool(tool, args, result=same if tool == "exec" else {"text": "x"})
        # The agent's think time; lets decisions arrive before the next cycle, as in life.
        client.wait_for(run.run_id, lambda ds: True, timeout=0.01)
        time.sleep(0.02)
    return False


def test_ping_pong_loop_is_warned_blocked_and_aborted(running_pipeline) -> None:
    pipeline, client = running_pipeline
    run = client.start_run("coder")
    assert drive_ping_pong(run, client), "the run was never aborted"
    run.end()
    expected = expected_decisions(run.events)
    received = wait_for_count(client, run.run_id, len(expected))
    assert by_key(received) == by_key(expected)
    actions = [d.action for d in expected]
    assert actions.index(Action.WARN) < actions.index(Action.BLOCK) < actions.index(Action.ABORT)
    assert {d.detector for d in expected if d.action is not Action.ABORT} == {"ping_pong"}
    rows = wait_for_audit(pipeline, run.run_id, len(expected))
    assert by_key(rows) == by_key(expected)
    assert client.duplicates == 0
    # Run progress from the worker's watermarks: `loopguard runs` shows how far the run got.
    deadline = time.monotonic() + 30
    while True:
        with pipeline.store() as store:
            (summary,) = [s for s in store.runs() if s.run_id == run.run_id]
        if summary.last_seq == run.seq or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (summary.last_seq, summary.events, summary.status) == (run.seq, run.seq, "aborted")
    # The worker runs the build of the core this process imported (CI's compiled run too).
    assert f"detector core: {core_build()}" in pipeline.worker_logs(tail=10**7)


def test_a_gateway_keeps_only_its_own_runs_of_the_fleet(running_pipeline) -> None:
    """Every gateway reads the whole control topic: another gateway's runs reach its
    on_decision and are counted, not kept, so its memory follows its own runs."""
    pipeline, client = running_pipeline
    heard: list[Decision] = []
    other = pipeline.client("gw-other", on_decision=heard.append)
    run = client.start_run("coder")
    assert drive_ping_pong(run, client), "the run was never aborted"
    run.end()
    own = client.wait_for(run.run_id, lambda ds: any(d.action is Action.ABORT for d in ds))
    deadline = time.monotonic() + 30
    while len(heard) < len(own) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(d.decision_id for d in heard) == sorted(d.decision_id for d in own)
    assert other.control.tracked_runs() == 0
    assert other.other_runs >= len(own)
    assert other.decisions(run.run_id) == []


def test_compaction_loop_aborts_with_compaction_loop_persisted(running_pipeline) -> None:
    pipeline, client = running_pipeline
    run = client.start_run("researcher")
    run.before_tool("web_search", {"q": "a"})
    run.after_tool("web_search", {"q": "a"}, result={"text": "r1"})
    run.compaction("context_overflow")
    for _ in range(3):
        run.before_tool("web_fetch", {"url": "u"})
        run.after_tool("web_fetch", {"url": "u"}, error="timeout after 30s")
    run.end()
    received = wait_for_count(client, run.run_id, 1)
    assert [d.error_code for d in received] == ["compaction_loop_persisted"]
    assert received[0].action is Action.ABORT and received[0].tool_name == "web_fetch"
    assert by_key(received) == by_key(expected_decisions(run.events))
    assert [d.decision_id for d in wait_for_audit(pipeline, run.run_id, 1)] == [
        received[0].decision_id
    ]


def test_without_the_fast_handoff_patch_the_worker_decides_the_same(
    pipeline_factory, migrated_db_url
) -> None:
    """LOOPGUARD_FAST_HANDOFF=0 is the kill switch of one Faust patch: Faust's own path."""
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    pipeline.start_worker(LOOPGUARD_FAST_HANDOFF="0")
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    pipeline.wait_ready(client)
    run = client.start_run("coder")
    assert drive_ping_pong(run, client), "the run was never aborted"
    run.end()
    expected = expected_decisions(run.events)
    assert by_key(wait_for_count(client, run.run_id, len(expected))) == by_key(expected)
    assert "'fast_handoff': False" in pipeline.worker_logs(tail=100_000)


def _empty_run_id_event() -> bytes:
    """A well-formed Avro event whose run id is empty (the codec refuses to write one)."""
    valid = encode_event(ToolCall(Envelope("r", "a", "g", 1, 1), "exec", "{}"))
    header = valid[:10]
    schema = fastavro.parse_schema(json.loads(event_schema_json()))
    buf = io.BytesIO()
    datum = {
        "run_id": "",
        "agent_id": "a",
        "gateway_id": "g",
        "seq": 1,
        "event_time": 1,
        "body": ("loopguard.ToolCall", {"tool_name": "x", "args_json": "{}"}),
    }
    fastavro.schemaless_writer(buf, schema, datum)
    return header + buf.getvalue()


def test_bad_input_is_dead_lettered_and_the_worker_keeps_going(running_pipeline) -> None:
    pipeline, client = running_pipeline
    topics = pipeline.settings.topics
    valid = encode_event(ToolCall(Envelope("bad-run", "a", "g", 1, 1), "exec", "{}"))
    bad_inputs = {
        "garbage": b"\x00\x01not avro at all",
        "wrong marker": b"\xc3\x02" + valid[2:],
        "truncated": valid[:-3],
        "unknown schema": valid[:2] + b"\xff" * 8 + valid[10:],
        "missing run id": _empty_run_id_event(),
        "oversized": valid[:10] + b"x" * (1_048_576 + 10),
        "empty": b"",
    }
    producer = KafkaProducer(
        bootstrap_servers=pipeline.broker.bootstrap, max_request_size=4 * 1_048_576
    )
    for name, payload in bad_inputs.items():
        producer.send(topics.events, key=name.encode(), value=payload)
    producer.flush()
    producer.close()

    # The worker is still alive and processing: a compaction loop after the junk is caught.
    run = client.start_run("after-junk")
    run.compaction()
    for _ in range(3):
        run.before_tool("exec", {"cmd": "ls"})
        run.after_tool("exec", {"cmd": "ls"}, result={"text": "same"})
    run.end()
    assert wait_for_count(client, run.run_id, 1)[0].error_code == "compaction_loop_persisted"

    consumer = KafkaConsumer(
        bootstrap_servers=pipeline.broker.bootstrap, group_id=None, consumer_timeout_ms=3000
    )
    partitions = [
        TopicPartition(topics.deadletter, p)
        for p in consumer.partitions_for_topic(topics.deadletter)
    ]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    letters = {}
    deadline = time.monotonic() + 30
    while len(letters) < len(bad_inputs) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            for record in records:
                letter = decode_dead_letter(record.value)
                letters[letter.key.decode()] = letter
    consumer.close()
    assert set(letters) == set(bad_inputs)
    for name, letter in letters.items():
        if name == "oversized":  # too big to copy whole: a prefix, and where the rest is
            assert letter.payload == bad_inputs[name][:65_536]
            assert "truncated" in letter.error
        else:
            assert letter.payload == bad_inputs[name], name  # original bytes kept
        assert letter.error and "Traceback" not in letter.error
    assert "fingerprint" in letters["unknown schema"].error.lower()
    assert "run" in letters["missing run id"].error.lower()

    deadline = time.monotonic() + 30
    with pipeline.store() as store:
        while store.dead_letter_count() < len(bad_inputs) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.dead_letter_count() == len(bad_inputs)


def test_duplicated_and_reordered_delivery_gives_in_order_decisions(running_pipeline) -> None:
    pipeline, client = running_pipeline
    run_id = "shuffled-run"
    events = []
    seq = 0
    for _ in range(25):  # generic repeat with identical results: warn, block, abort
        for kind in ("call", "result"):
            seq += 1
            env = Envelope(run_id, "coder", "gw-test", seq, seq)
            if kind == "call":
                events.append(ToolCall(env, "grep", '{"q": "x"}'))
            else:
                events.append(ToolResult(env, "grep", '{"q": "x"}', '{"text": "none"}'))
    expected = expected_decisions(events)
    assert [d.action for d in expected][-1] is Action.ABORT

    rng = random.Random(7)
    delivered = events + rng.sample(events, 15)  # duplicates
    # shuffle within windows smaller than the reorder limit
    for start in range(0, len(delivered), 8):
        window = delivered[start : start + 8]
        rng.shuffle(window)
        delivered[start : start + 8] = window
    client.watch(run_id)  # its events go out through a producer of the test's own
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap)
    topic = pipeline.settings.topics.events
    for event in delivered:
        producer.send(topic, key=run_id.encode(), value=encode_event(event))
    producer.flush()
    producer.close()

    wait_for_count(client, run_id, len(expected))
    time.sleep(0.5)  # nothing extra may trickle in after the expected set
    assert by_key(client.decisions(run_id)) == by_key(expected)


def test_events_keyed_by_something_else_are_rekeyed_by_run_id(running_pipeline) -> None:
    pipeline, client = running_pipeline
    run_id = "mis-keyed-run"
    client.watch(run_id)
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap)
    topic = pipeline.settings.topics.events
    events = []
    seq = 0
    seq += 1
    events.append(CompactionRetry(Envelope(run_id, "a", "g", seq, seq)))
    for _ in range(3):
        seq += 1
        events.append(ToolCall(Envelope(run_id, "a", "g", seq, seq), "exec", "{}"))
        seq += 1
        events.append(ToolResult(Envelope(run_id, "a", "g", seq, seq), "exec", "{}", '"same"'))
    for i, event in enumerate(events):
        producer.send(topic, key=f"k{i}".encode(), value=encode_event(event))
    producer.flush()
    producer.close()
    received = wait_for_count(client, run_id, 1)
    assert by_key(received) == by_key(expected_decisions(events))


def _evolved_schema_json() -> str:
    """Our AgentEvent schema as a newer gateway might write it: ToolCall has a new field."""
    schema = json.loads(event_schema_json())
    body = next(f for f in schema["fields"] if f["name"] == "body")
    for branch in body["type"]:
        if branch["name"].endswith("ToolCall"):
            branch["fields"].append({"name": "model", "type": ["null", "string"], "default": None})
    return json.dumps(schema)


def test_newer_gateway_schema_is_resolved_from_the_schemas_topic(running_pipeline) -> None:
    pipeline, client = running_pipeline
    evolved = _evolved_schema_json()
    registry = SchemaRegistry()
    fingerprint = registry.register(evolved)
    parsed = fastavro.parse_schema(json.loads(evolved))
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap)
    publish_schema(producer, pipeline.settings.topics.schemas, registry, evolved)

    def encode_new(event) -> bytes:
        data = event_to_dict(event)
        kind = data.pop("kind")
        envelope = {
            k: data.pop(k) for k in ("run_id", "agent_id", "gateway_id", "seq", "event_time")
        }
        branch = {"tool_call": "ToolCall", "tool_result": "ToolResult"}.get(kind, "CompactionRetry")
        if kind == "tool_call":
            data["model"] = "gpt-next"
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {**envelope, "body": (f"loopguard.{branch}", data)})
        return b"\xc3\x01" + fingerprint + buf.getvalue()

    run_id = "newer-gateway-run"
    client.watch(run_id)
    events = [CompactionRetry(Envelope(run_id, "a", "gw-new", 1, 1))]
    for i in range(3):
        seq = 2 + 2 * i
        events.append(ToolCall(Envelope(run_id, "a", "gw-new", seq, seq), "exec", '{"c": 1}'))
        events.append(
            ToolResult(Envelope(run_id, "a", "gw-new", seq + 1, seq), "exec", '{"c": 1}', '"x"')
        )
    for event in events:
        producer.send(pipeline.settings.topics.events, key=run_id.encode(), value=encode_new(event))
    producer.flush()
    producer.close()
    received = wait_for_count(client, run_id, 1)
    assert by_key(received) == by_key(expected_decisions(events))
