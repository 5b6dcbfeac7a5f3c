"""Issue 26 on the real broker: bounded work per bad record (item 6), bounded memory (item 7).

Unknown schema fingerprints used to cost a full read of the schemas topic each, on the guard
path: 200 junk records in front of a looping run held its abort for 47 s. Now the topic is read
incrementally and misses are cached, so the work per bad record is bounded and the run behind
the junk is still aborted. A run dated in the future never expired; now it expires by arrival
time.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer
from services import ENABLED, IN_TIME_BUDGET_MS

from streams.audit.store import AuditStore
from streams.core.events import CompactionRetry, Envelope, ToolCall, ToolResult
from streams.kafka.lookup_quota import LookupQuota
from streams.kafka.schema_topic import SchemaTopic, publish_schema
from streams.wire.avro import encode_event
from streams.wire.schema_registry import ParsedSchema, SchemaRegistry, schema_fingerprint

pytestmark = pytest.mark.integration

JUNK = 200
NO_QUOTA = LookupQuota(producer_burst=1e9, fleet_burst=1e9)


class CountingRegistry(SchemaRegistry):
    """A real registry that counts the schemas parsed and handed to it."""

    def __init__(self) -> None:
        super().__init__()
        self.registered = 0

    def add(self, schema: ParsedSchema) -> bytes:
        self.registered += 1
        return super().add(schema)


def _schema(i: int) -> str:
    return json.dumps(
        {"type": "record", "name": f"Extra{i}", "fields": [{"name": "x", "type": "long"}]}
    )


def _sqlite_pipeline(pipeline_factory, tmp_path: Path, **options):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(url) as store:
        store.migrate()
    return pipeline_factory(url, **options)


def test_unknown_fingerprints_read_the_schemas_topic_once_not_once_each(
    pipeline_factory, tmp_path: Path
) -> None:
    pipeline = _sqlite_pipeline(pipeline_factory, tmp_path)
    topic = pipeline.settings.topics.schemas
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap)
    published = SchemaRegistry()
    for i in range(30):
        publish_schema(producer, topic, published, _schema(i))

    registry = CountingRegistry()
    schemas = SchemaTopic(
        pipeline.broker.bootstrap.split(","),
        topic,
        registry,
        retry_after=600,
        max_missed=50,
        quota=NO_QUOTA,  # the reads are what this test counts, not who may ask
    )
    try:
        junk = [os.urandom(8) for _ in range(JUNK)]
        assert not any(schemas.resolve(fp) for fp in junk)
        # Every record of the topic was read once, whatever the number of lookups; none
        # was parsed, since none was asked for (issue 40).
        assert schemas.records_read == 30 and registry.registered == 0
        assert schemas.missed() == 50  # the negative cache is bounded: the newest 50
        assert schemas.known_missing(junk[-1]) and not schemas.known_missing(junk[0])
        # The newest junk again: answered from the negative cache, no fetch at all.
        fetches = schemas.fetches
        assert not any(schemas.resolve(fp) for fp in junk[-20:])
        assert schemas.records_read == 30 and schemas.fetches == fetches

        # A schema published later is found: the next lookup reads only the new record.
        fingerprint = published.register(_schema(99))
        publish_schema(producer, topic, published, _schema(99))
        assert schemas.resolve(fingerprint)
        assert schemas.records_read == 31 and registry.registered == 1
        # One read before and not asked for then is fetched alone when it is.
        assert schemas.resolve(published.register(_schema(7)))
        assert schemas.records_read == 31 and registry.registered == 2
    finally:
        schemas.close()
        producer.close()


def test_a_flood_of_30000_schemas_and_unknown_ids_is_read_once_and_parses_nothing(
    pipeline_factory, tmp_path: Path
) -> None:
    """Issue 40 item 7: the work such a flood puts on the guard path, counted (it held a
    looping run's abort for 21 s, parsing every schema it read): the flood is read once and
    nothing of it is parsed or kept; the flooding producer's lookups past its quota touch no
    broker, and another gateway's schema published after the flood is still found."""
    pipeline = _sqlite_pipeline(pipeline_factory, tmp_path)
    topic = pipeline.settings.topics.schemas
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap, linger_ms=50)
    flood = 30_000
    for i in range(flood):
        text = _schema(100_000 + i)
        producer.send(topic, key=schema_fingerprint(text).hex().encode(), value=text.encode())
    producer.flush()
    registry = CountingRegistry()
    # The default bursts, no refill while the test runs (however long the reads take).
    quota = LookupQuota(producer_per_second=1e-9, fleet_per_second=1e-9)
    schemas = SchemaTopic(pipeline.broker.bootstrap.split(","), topic, registry, quota=quota)
    try:
        unknown = [os.urandom(8) for _ in range(20)]
        assert not any(schemas.resolve(fp, "flooder") for fp in unknown)
        assert registry.registered == 0 and len(registry) == len(SchemaRegistry())
        assert schemas.records_read <= flood and schemas.quota.refused == 17  # burst: 3
        print(f"flood: {schemas.records_read} records read, {schemas.fetches} polls")
        published = SchemaRegistry()
        victim = published.register(_schema(1))
        publish_schema(producer, topic, published, _schema(1))
        assert schemas.resolve(victim, "victim")
        assert registry.registered == 1 and schemas.records_read <= flood + 1
    finally:
        schemas.close()
        producer.close()


def test_a_schema_evicted_from_the_bounded_registry_is_fetched_alone_again(
    pipeline_factory, tmp_path: Path
) -> None:
    """Issue 40: the registry keeps the most recently used schemas only; one evicted is read
    again from where the topic holds it, with no catch-up from the start."""
    pipeline = _sqlite_pipeline(pipeline_factory, tmp_path)
    topic = pipeline.settings.topics.schemas
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap)
    published = SchemaRegistry()
    first, second = (published.register(_schema(i)) for i in (0, 1))
    for i in range(3):
        publish_schema(producer, topic, published, _schema(i))
    registry = CountingRegistry()
    registry.max_schemas = 1
    schemas = SchemaTopic(pipeline.broker.bootstrap.split(","), topic, registry, quota=NO_QUOTA)
    try:
        assert schemas.resolve(first) and schemas.resolve(second)
        assert first not in registry and registry.evicted == 1
        assert schemas.records_read == 3 and schemas.indexed() == 3
        assert schemas.resolve(first)  # fetched alone: no record of the topic read again
        assert first in registry and schemas.records_read == 3 and registry.registered == 3
    finally:
        schemas.close()
        producer.close()


def test_a_missed_fingerprint_published_later_is_found_after_the_retry_time(
    pipeline_factory, tmp_path: Path
) -> None:
    pipeline = _sqlite_pipeline(pipeline_factory, tmp_path)
    topic = pipeline.settings.topics.schemas
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap)
    published = SchemaRegistry()
    publish_schema(producer, topic, published, _schema(0))
    late = SchemaRegistry().register(_schema(1))
    # retry_after 0: the negative cache never hides a schema that was published since.
    servers = pipeline.broker.bootstrap.split(",")  # Kafka: every node of the cluster
    schemas = SchemaTopic(servers, topic, SchemaRegistry(), retry_after=0)
    try:
        assert not schemas.resolve(late)
        publish_schema(producer, topic, published, _schema(1))
        assert schemas.resolve(late)
    finally:
        schemas.close()
        producer.close()


def test_junk_schema_ids_ahead_of_a_looping_run_do_not_hold_its_abort(
    pipeline_factory, tmp_path: Path
) -> None:
    pipeline = _sqlite_pipeline(pipeline_factory, tmp_path, config=ENABLED)
    # A schemas topic with something on it, as in a fleet where gateways published.
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap)
    published = SchemaRegistry()
    for i in range(30):
        publish_schema(producer, pipeline.settings.topics.schemas, published, _schema(i))
    client = pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)

    run_id = "behind-the-junk"
    client.watch(run_id)  # its events go out through the producer above
    valid = encode_event(ToolCall(Envelope(run_id, "a", "g", 1, 1), "exec", "{}"))
    topic = pipeline.settings.topics.events
    # Same key as the run: every junk record is ahead of it on its partition.
    for _ in range(JUNK):
        producer.send(topic, key=run_id.encode(), value=valid[:2] + os.urandom(8) + valid[10:])
    events = [CompactionRetry(Envelope(run_id, "a", "g", 1, 1))]
    for i in range(3):
        seq = 2 + 2 * i
        events.append(ToolCall(Envelope(run_id, "a", "g", seq, seq), "exec", "{}"))
        events.append(ToolResult(Envelope(run_id, "a", "g", seq + 1, seq), "exec", "{}", '"x"'))
    for event in events:
        producer.send(topic, key=run_id.encode(), value=encode_event(event))
    producer.flush()
    producer.close()
    sent_at = time.monotonic()

    # Before: 200 full reads of the schemas topic (47 s in the probe) held the abort;
    # the gateway's own verdict budget is what we wait, doubled.
    received = client.wait_for(
        run_id, lambda ds: len(ds) >= 1, timeout=2 * IN_TIME_BUDGET_MS / 1000
    )
    assert [d.error_code for d in received] == ["compaction_loop_persisted"], pipeline.worker_logs()
    print(f"abort behind {JUNK} junk records: {time.monotonic() - sent_at:.2f} s after the send")
    deadline = time.monotonic() + 60
    with pipeline.store() as store:
        while store.dead_letter_count() < JUNK and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.dead_letter_count() == JUNK


def test_a_run_dated_in_the_future_expires_in_a_real_worker(
    pipeline_factory, tmp_path: Path
) -> None:
    """One partition, so a clock run's in-time verdicts mean the future-dated run before it
    was applied; the clock run keeps sending (moving the watermark on) until the worker's
    expiry sweep (every second here, LOOPGUARD_EXPIRY_INTERVAL) reports an idle run gone: the
    future-dated one, since the clock run is the newest and the readiness canary ended."""
    pipeline = _sqlite_pipeline(pipeline_factory, tmp_path, config=ENABLED, partitions=1)
    pipeline.start_worker(LOOPGUARD_RUN_IDLE_TTL="1", LOOPGUARD_EXPIRY_INTERVAL="1")
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    pipeline.wait_ready(client)

    run_id = "from-the-future"
    client.watch(run_id)
    tomorrow = int(time.time() * 1000) + 86_400_000
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap)
    topic = pipeline.settings.topics.events
    for event in (
        ToolCall(Envelope(run_id, "a", "g", 1, tomorrow), "exec", "{}"),
        ToolResult(Envelope(run_id, "a", "g", 2, tomorrow), "exec", "{}", '"x"'),
    ):
        producer.send(topic, key=run_id.encode(), value=encode_event(event))
    producer.flush()
    producer.close()

    idle_expired = re.compile(r"expired \d+ runs \([^)]*\b\d+ idle")
    clock = client.start_run("clock")
    deadline = time.monotonic() + 90
    step = 0
    while not idle_expired.search(pipeline.worker_logs(tail=10**7)):
        assert time.monotonic() < deadline, pipeline.worker_logs()
        step += 1
        clock.before_tool("read_file", {"path": f"f{step}"})
        clock.after_tool("read_file", {"path": f"f{step}"}, result={"text": str(step)})
    clock.end()
