"""The loopguard Faust app: events topic → per-run table → control topic, plus the audit trail.

Data flow (one partition key everywhere: the run id)::

    loopguard.events ──guard_runs──► runs table (changelog) ──► loopguard.control
          │ bad input                                              │
          └──────────────► loopguard.deadletter ──audit_dead_letters──► SQL
                                   loopguard.control ──audit_decisions──► SQL

The audit writers read the durable control/dead-letter topics, so a database outage only
delays the audit trail: decisions keep flowing to gateways, and the SQL rows are written
(idempotently) once the database is back.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import Counter
from pathlib import Path
from typing import Any

import faust

from streams.core.config import (
    FleetConfig,
    LoopDetectionConfig,
    fleet_from_document,
    load_fleet_config,
)
from streams.core.engine import core_build
from streams.core.events import AgentEvent, Decision
from streams.core.run_state import ACTIVE, RunState
from streams.kafka.config_topic import ConfigWatcher
from streams.kafka.schema_topic import SchemaTopic
from streams.settings import Settings
from streams.wire.avro import (
    CodecError,
    DeadLetterRecord,
    decode_decision,
    decode_event,
    encode_dead_letter,
    encode_decision,
)
from streams.wire.errors import UnknownSchemaError
from streams.wire.schema_registry import default_registry
from streams.worker import state_codec
from streams.worker.audit_writer import AuditWriter
from streams.worker.expiry import RunExpiry
from streams.worker.faust_patches import (
    fast_message_handoff,
    ordered_recovery_resume,
    set_fetch_max_wait,
)
from streams.worker.web import register_views

log = logging.getLogger("loopguard.worker")

settings = Settings.from_env()
state_codec.register()
set_fetch_max_wait(settings.fetch_max_wait_ms)
ordered_recovery_resume()  # never lose events that arrive while a worker restores its tables
if settings.fast_handoff:
    fast_message_handoff()
Path(settings.data_dir).mkdir(parents=True, exist_ok=True)


def _broker_credentials() -> Any:
    """SASL and/or TLS from settings; passwords go to the client, never to the log."""
    ssl_context = None
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        ssl_context = ssl.create_default_context(cafile=settings.ssl_cafile or None)
    if settings.sasl_mechanism:
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password,
            mechanism=settings.sasl_mechanism,
            ssl_context=ssl_context,
        )
    if ssl_context is not None:
        return faust.SSLCredentials(ssl_context)
    return None


app = faust.App(
    settings.app_id,
    broker=settings.broker,
    broker_credentials=_broker_credentials(),
    store="memory://",
    topic_partitions=settings.partitions,
    topic_replication_factor=settings.replication,
    table_standby_replicas=0,
    consumer_auto_offset_reset="earliest",
    broker_session_timeout=settings.session_timeout,
    broker_heartbeat_interval=settings.heartbeat_interval,
    broker_rebalance_timeout=settings.rebalance_timeout,
    broker_commit_interval=settings.commit_interval,
    # tansu reports a topic's end offset as "first offset of the last batch + 1", so table
    # recovery would stop short of the newest changelog records when a batch holds several;
    # one record per batch keeps recovery exact there. Raise it against Apache Kafka.
    producer_max_batch_size=settings.producer_max_batch,
    web_enabled=settings.web_enabled,
    web_port=settings.web_port,
    web_bind="127.0.0.1",
    datadir=f"{settings.data_dir}/{{conf.name}}",
    producer_max_request_size=settings.max_message_bytes * 3,
)

raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
events_topic = app.topic(settings.topics.events, **raw)
control_topic = app.topic(settings.topics.control, **raw)
deadletter_topic = app.topic(settings.topics.deadletter, **raw)

# The changelog carries RunState through our codec (Faust would pick JSON for a plain
# class and hand dicts back on recovery), so declare its topic explicitly.
runs_changelog = app.topic(
    f"{settings.app_id}-runs-changelog",
    key_type=bytes,
    key_serializer="raw",
    value_serializer=state_codec.CODEC_NAME,
    partitions=settings.partitions,
    compacting=True,
    acks=False,
    internal=True,
    maxsize=131_072,
    allow_empty=True,
)
runs = app.Table(
    "runs",
    default=None,
    key_type=bytes,  # the raw run id, exactly the events topic's message key
    use_partitioner=True,  # changelog partition = murmur2(run id), same as the events topic
    changelog_topic=runs_changelog,
)
runs.value_serializer = state_codec.CODEC_NAME  # used when the table writes its changelog
# Per-agent overrides published at run time (`loopguard config set`): every worker reads all.
agent_overrides = ConfigWatcher(
    settings.bootstrap_servers, settings.topics.config, **settings.kafka_client_options()
)


class ConfigBook:
    """Resolved config per agent: the file's fleet config plus run-time overrides."""

    GLOBAL_KEY = "*"

    def __init__(self, fleet: FleetConfig) -> None:
        self.fleet = fleet
        self._cache: dict[tuple[str, int], LoopDetectionConfig] = {}

    def for_agent(self, agent_id: str) -> LoopDetectionConfig:
        agent_block = agent_overrides.get(agent_id)
        global_block = agent_overrides.get(self.GLOBAL_KEY)
        key = (agent_id, agent_overrides.version)
        cfg = self._cache.get(key)
        if cfg is None:
            fleet = self.fleet
            if global_block is not None:
                fleet = FleetConfig(global_block, fleet.agent_blocks)
            if agent_block is not None:
                fleet = fleet.with_agent(agent_id, agent_block)
            cfg = self._cache[key] = fleet.for_agent(agent_id)
        return cfg


configs = ConfigBook(
    load_fleet_config(settings.config_file) if settings.config_file else fleet_from_document({})
)
audit = AuditWriter(settings.db_url)
registry = default_registry()
schema_topic = SchemaTopic(
    settings.bootstrap_servers,
    settings.topics.schemas,
    registry,
    **settings.kafka_client_options(),
)
register_views(app, settings.db_url)  # HTTP API, served with `loopguard worker --web-port`
expiry = RunExpiry(settings.run_idle_ttl)


DEAD_LETTER_PAYLOAD_LIMIT = 65_536


async def dead_letter(message: Any, error: str) -> None:
    """Park undecodable input with its original bytes; never stop the worker for it.

    A payload larger than the message limit keeps only its first 64 KiB (the record names the
    source topic, partition and offset, where the whole message still is): copying it whole
    could exceed the broker's request size and take the worker down with it.
    """
    payload = message.value or b""
    if len(payload) > settings.max_message_bytes:
        error = (
            f"{error} (payload truncated to its first {DEAD_LETTER_PAYLOAD_LIMIT} of "
            f"{len(payload)} bytes; the whole message is at the source offset)"
        )
        payload = payload[:DEAD_LETTER_PAYLOAD_LIMIT]
    log.warning(
        "dead-lettered %s[%s]@%s: %s", message.topic, message.partition, message.offset, error
    )
    record = DeadLetterRecord(
        source_topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        error=error,
        key=message.key,
        payload=payload,
        event_time=int(time.time() * 1000),
    )
    await deadletter_topic.send(key=message.key, value=encode_dead_letter(record))


@app.agent(events_topic)
async def guard_runs(stream: faust.StreamT) -> None:
    """Apply events to their runs' state; publish decisions to the control topic.

    Events are taken in small batches (bounded by ``LOOPGUARD_BATCH_WINDOW_MS``) so a run's
    state is written to the changelog once per batch instead of once per event: the table
    write, not the detector, is what bounds a Faust worker's throughput.
    """
    async for batch in stream.take_events(settings.batch_size, within=settings.batch_window):
        touched: dict[bytes, RunState] = {}
        for event in batch:
            decisions = await _guard_one(event.message, touched)
            for decision in decisions:
                await control_topic.send(
                    key=decision.run_id.encode(), value=encode_decision(decision)
                )
        now = time.time()
        for key, state in touched.items():
            runs[key] = state
            expiry.touch(key, now)


async def _decode(value: bytes) -> AgentEvent:
    """Decode an event; a writer schema we have not seen is looked up on the schemas topic."""
    try:
        return decode_event(value, registry, max_size=settings.max_message_bytes)
    except UnknownSchemaError as exc:
        if not await asyncio.to_thread(schema_topic.resolve, exc.fingerprint):
            raise
        return decode_event(value, registry, max_size=settings.max_message_bytes)


async def _guard_one(message: Any, touched: dict[bytes, RunState]) -> list[Decision]:
    try:
        agent_event = await _decode(message.value)
    except CodecError as exc:
        await dead_letter(message, str(exc))
        return []
    run_id = agent_event.envelope.run_id
    if agent_event.envelope.seq < 1:
        await dead_letter(
            message,
            f"seq must be 1 or more (run sequences start at 1), got {agent_event.envelope.seq}",
        )
        return []
    key = run_id.encode()
    if message.key != key:
        # Keyed by something else: re-key so the run's state lives on one partition.
        await events_topic.send(key=key, value=message.value)
        return []
    expiry.observe(agent_event.envelope.event_time, time.time())
    cfg = configs.for_agent(agent_event.envelope.agent_id)
    state = touched.get(key) or runs.get(key) or RunState(run_id, cfg.history_size)
    touched[key] = state
    seq = agent_event.envelope.seq
    if state.is_duplicate(seq):
        # Redelivered (e.g. after a crash): publish again what this event decided, with the
        # same decision ids, in case the first publication died in the producer buffer.
        return state.decisions_for(seq)
    return state.apply(agent_event, cfg)


@app.agent(control_topic)
async def audit_decisions(stream: faust.StreamT) -> None:
    """Write every decision to SQL in batches; retries until the database takes them."""
    async for batch in stream.take(settings.audit_batch, within=0.2):
        decisions = []
        for value in batch:
            try:
                decisions.append(decode_decision(value))
            except CodecError as exc:
                log.warning("skipping undecodable control message: %s", exc)
        await audit.write_decisions(decisions)


@app.agent(deadletter_topic)
async def audit_dead_letters(stream: faust.StreamT) -> None:
    async for event in stream.events():
        await audit.write_dead_letter(event.value)


@app.timer(interval=10.0)
async def expire_runs() -> None:
    """Drop state of runs that ended or went idle (see streams.worker.expiry), and say so."""
    now = time.time()
    dropped: Counter[str] = Counter()
    for run_id, state in list(runs.items()):
        reason = expiry.reason(run_id, state.status == ACTIVE, state.last_event_time, now)
        if reason:
            del runs[run_id]
            expiry.forget(run_id)
            dropped[reason] += 1
    expiry.retain(set(runs.keys()))
    if dropped:
        log.info(
            "expired %d runs (%s); %d runs in this worker's table",
            dropped.total(),
            ", ".join(f"{n} {why}" for why, n in sorted(dropped.items())),
            len(runs),
        )


@app.task
async def announce() -> None:
    log.info("loopguard worker settings: %s", settings.redacted())
    log.info("detector core: %s", core_build())
    agent_overrides.start()
    await asyncio.sleep(0)


@app.on_partitions_assigned.connect
async def log_assignment(sender: faust.App, assigned: set[Any], **kwargs: Any) -> None:
    """One line per rebalance saying which events partitions this worker now owns."""
    mine = sorted(tp.partition for tp in assigned if tp.topic == settings.topics.events)
    log.info("events partitions assigned to this worker: %s", mine)
