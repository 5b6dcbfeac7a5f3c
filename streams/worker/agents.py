"""The worker's Faust agents, timers and tasks, over the objects :mod:`bootstrap` built.

Data flow (one partition key everywhere: the event's session id when it has one, else its run
id; the runs table writes a run's state on that partition too, see :mod:`tables`)::

    <prefix>.events ──guard_runs──► runs table (changelog) ──► <prefix>.control
          │ bad input                                              │
          └──────────────► <prefix>.deadletter ──audit_dead_letters──► SQL
                                   <prefix>.control ──audit_decisions──► SQL

The audit writers read the durable control/dead-letter topics, so a database outage only
delays the audit trail: decisions keep flowing to gateways, and the SQL rows are written
(idempotently) once the database is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import faust
from faust.types import TP
from mode import CrashingSupervisor

from streams.audit.config_changes import ConfigChangeRecorder
from streams.audit.writer import AuditWriter, RecordRefused
from streams.core.engine import core_build
from streams.core.events import AgentEvent, Decision, event_kind
from streams.core.fleet import FleetConfig
from streams.core.run_state import ACTIVE
from streams.kafka.config_topic import ConfigWatcher
from streams.kafka.rekey import Rekeyer
from streams.kafka.schema_topic import SchemaTopic
from streams.observability.metrics import WorkerMetrics, unread_records
from streams.service.processor import EventProcessor
from streams.settings import Settings
from streams.state.expiry import RunExpiry, eviction_class
from streams.state.state_format import encode as encode_state
from streams.webhooks.notifier import WebhookNotifier
from streams.wire.avro import (
    CodecError,
    DeadLetterRecord,
    decode_control,
    decode_event,
    encode_dead_letter,
    encode_decision,
    encode_watermark,
)
from streams.wire.errors import UnknownSchemaError
from streams.wire.schema_registry import SchemaRegistry
from streams.worker.batch_sends import BatchSends
from streams.worker.config_audit import start_config_audit
from streams.worker.crash_exit import CrashExit
from streams.worker.exactly_once import (
    commit_batch,
    commit_outside_batches,
    drain_producer_buffer,
    in_transaction_of,
    source_transaction,
)
from streams.worker.ready_batches import take_ready

log = logging.getLogger("loopguard.worker")

DEAD_LETTER_PAYLOAD_LIMIT = 65_536
LAG_SAMPLE_SECONDS = 5.0
STALL_SECONDS = 30.0  # events waiting and none applied for this long: not guarding


@dataclass
class WorkerParts:
    """Everything the agents use; built once by :func:`streams.worker.bootstrap.build_worker`."""

    settings: Settings
    app: faust.App
    events_topic: Any
    control_topic: Any
    deadletter_topic: Any
    runs: Any  # the Faust table: run id (bytes) -> RunState
    sessions: Any  # the Faust table: session id (bytes) -> its latest run id (bytes)
    processor: EventProcessor
    registry: SchemaRegistry
    schema_topic: SchemaTopic
    overrides: ConfigWatcher
    audit: AuditWriter
    expiry: RunExpiry
    rekeyer: Rekeyer
    metrics: WorkerMetrics
    webhooks: WebhookNotifier | None = None  # block/abort notifications, when URLs are set
    fleet: FleetConfig | None = None  # the --config file, recorded as a config change
    # Held while a batch is applied and published; exactly-once commits wait for it
    # (streams.worker.exactly_once).
    commit_barrier: asyncio.Lock = field(default_factory=asyncio.Lock)


class WorkerAgents:
    """The agents' bodies; :meth:`register` attaches them to the app under stable names."""

    def __init__(self, parts: WorkerParts) -> None:
        self.parts = parts
        self.settings = parts.settings
        self.crashing: asyncio.Future | None = None  # held: a task nobody keeps can vanish
        self.config_audit: ConfigChangeRecorder | None = None  # started by announce

    def register(self) -> None:
        app, parts = self.parts.app, self.parts
        # An agent that crashes takes the worker down (exit code 1) rather than leaving a
        # live process that guards nothing; its supervisor (compose, systemd) restarts it.
        # Faust's stop can hang after a crash (#324), so the crash also arms a deadline.
        crash = {"supervisor_strategy": CrashingSupervisor}
        exit_after = CrashExit(self.settings.crash_exit_seconds)
        for topic, name, body in (
            (parts.events_topic, "guard_runs", self.guard_runs),
            (parts.control_topic, "audit_decisions", self.audit_decisions),
            (parts.deadletter_topic, "audit_dead_letters", self.audit_dead_letters),
        ):
            app.agent(topic, name=name, **crash)(exit_after.guard(name, body))
        app.timer(interval=10.0, name="expire_runs")(self.expire_runs)
        app.timer(interval=LAG_SAMPLE_SECONDS, name="sample_lag")(self.sample_lag)
        app.task(self.announce)
        if parts.webhooks is not None:
            app.task(parts.webhooks.run)
        app.on_partitions_assigned.connect(self.log_assignment)

    async def guard_runs(self, stream: faust.StreamT) -> None:
        """Apply events to their runs' state; publish decisions to the control topic.

        Events are taken in batches of what has queued up (:mod:`ready_batches`) so a run's
        state is written to the changelog once per batch instead of once per event: the table
        write, not the detector, is what bounds a Faust worker's throughput. Exactly once, a
        batch is committed as soon as its records are with the producer
        (:func:`streams.worker.exactly_once.commit_batch`): a read-committed gateway sees its
        decisions and watermarks one commit after the batch, not on Faust's timer.
        """
        parts, settings = self.parts, self.settings
        app = parts.app
        async for batch in take_ready(stream, settings.batch_size, settings.batch_window):
            async with parts.commit_barrier:
                await self.guard_batch(batch)
                for event in batch:  # now, so the commit below carries the batch's offsets
                    await stream.ack(event)
            if app.in_transaction:
                await commit_batch(app.consumer)

    async def guard_batch(self, batch: list[Any]) -> None:
        """Apply a batch, then send its records: decisions, each touched run's state (to
        the changelog) and watermark, every partition's in order and all partitions at once
        (:mod:`streams.worker.batch_sends`).

        Exactly once, whatever an event produces goes in the transaction of the event's
        partition, committed with its offset (streams.worker.exactly_once), even when the
        record is keyed elsewhere (a session run's decisions and watermarks, by run id)."""
        parts = self.parts
        app = parts.app
        sends = BatchSends(
            app.producer,
            app.producer.key_partition,
            partial(source_transaction, app),
            self.delivery_failed,
        )
        for event in batch:
            message = event.message
            source = TP(message.topic, message.partition)
            with in_transaction_of(source):
                await self.guard_one(message, sends, source)
        now = time.time()
        changelog = parts.runs.changelog_topic.get_topic_name()
        control = parts.control_topic.get_topic_name()
        for run in parts.processor.take_touched():
            # The state goes to its events' partition (streams.worker.tables), an applied
            # event came from there (else it is re-keyed), and so goes the watermark.
            tp = parts.runs.changelog_tp(run.key, run.state)
            # Stored without the table's own changelog write (Faust's producer buffer sends
            # one message at a time); the write goes out with the batch's records instead.
            parts.runs.data[run.key] = run.state
            sends.add(changelog, run.key, encode_state(run.state), tp.partition, source=tp)
            parts.expiry.touch(run.key, now)
            # After the run's decisions on the same partition: a gateway that sees it
            # holds every verdict up to its seq (in-time enforcement, run progress).
            sends.add(control, run.key, encode_watermark(run.watermark), source=tp)
        for session_key, run_key in parts.processor.take_sessions().items():
            parts.sessions[session_key] = run_key
        # Table writes through Faust's producer buffer (the sessions table, expiry's
        # deletes) go first, in order, so a run's delete never overtakes its state.
        await drain_producer_buffer(parts.app.producer.buffer)
        await sends.flush()

    async def guard_one(self, message: Any, sends: BatchSends, source: TP) -> None:
        parts, metrics = self.parts, self.parts.metrics
        started = time.perf_counter()
        try:
            agent_event = await self.decode(message.value)
        except CodecError as exc:
            metrics.observe_dead_letter(exc)
            await self.dead_letter(message, str(exc))
            return
        metrics.observe_event(event_kind(agent_event))
        outcome = parts.processor.apply(message.key, agent_event)
        if outcome.dead_letter is not None:
            metrics.observe_dead_letter("invalid_event")
            await self.dead_letter(message, outcome.dead_letter)
        elif outcome.rekey is not None:
            await parts.rekeyer.send(self.settings.topics.events, outcome.rekey, message.value)
        else:
            parts.expiry.observe(agent_event.envelope.event_time, time.time())
            control = parts.control_topic.get_topic_name()
            for decision in outcome.decisions:
                sends.add(
                    control,
                    decision.run_id.encode(),
                    encode_decision(decision),
                    source=source,
                )
            metrics.observe_decisions(outcome.decisions)
        metrics.observe_latency(time.perf_counter() - started)

    def delivery_failed(self, exc: BaseException) -> None:
        """A decision, state or watermark the producer gave up on: stop the worker rather
        than guard on past it (its supervisor restarts it from the last commit). A commit
        already under way may still take the events' offsets; Faust's own sends had no
        check at all."""
        self.crashing = asyncio.ensure_future(self.parts.app.crash(exc))

    async def decode(self, value: bytes) -> AgentEvent:
        """Decode an event; a writer schema we have not seen is looked up on the schemas topic."""
        parts, limit = self.parts, self.settings.max_message_bytes
        try:
            return decode_event(value, parts.registry, max_size=limit)
        except UnknownSchemaError as exc:
            # A fingerprint looked up in vain moments ago is dead-lettered at once: junk ids
            # cost no thread hop and no broker round trip each (streams/kafka/schema_topic.py).
            if parts.schema_topic.known_missing(exc.fingerprint):
                raise
            if not await asyncio.to_thread(parts.schema_topic.resolve, exc.fingerprint):
                raise
            return decode_event(value, parts.registry, max_size=limit)

    async def dead_letter(self, message: Any, error: str) -> None:
        """Park undecodable input with its original bytes; never stop the worker for it.

        A payload larger than the message limit keeps only its first 64 KiB (the record names
        the source topic, partition and offset, where the whole message still is): copying it
        whole could exceed the broker's request size and take the worker down with it.
        """
        payload = message.value or b""
        if len(payload) > self.settings.max_message_bytes:
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
        await self.parts.deadletter_topic.send(key=message.key, value=encode_dead_letter(record))

    async def audit_decisions(self, stream: faust.StreamT) -> None:
        """Write every decision and run's progress to SQL in batches; retries until the
        database takes them."""
        async for batch in stream.take(self.settings.audit_batch, within=0.2):
            decisions, watermarks = [], []
            for value in batch:
                try:
                    message = decode_control(value)
                except CodecError as exc:
                    log.warning("skipping undecodable control message: %s", exc)
                    continue
                if isinstance(message, Decision):
                    decisions.append(message)
                else:
                    watermarks.append(message)
            # A decision the database refused is quarantined, not posted (issue 26).
            _, stored = await self.parts.audit.store_decisions(decisions)
            if self.parts.webhooks is not None:  # queues; never waits for an endpoint
                try:
                    await self.parts.webhooks.submit(stored)
                except RecordRefused as exc:  # the outbox refused them: the trail goes on
                    log.error("webhook outbox refused %d notices: %s", len(stored), exc.error)
            await self.parts.audit.write_progress(watermarks)  # `loopguard runs` shows it

    async def audit_dead_letters(self, stream: faust.StreamT) -> None:
        async for event in stream.events():
            await self.parts.audit.write_dead_letter(event.value)

    async def expire_runs(self) -> None:
        """Drop state of runs that ended or went idle (see streams.state.expiry), and say so.

        In session scope a session's latest run is kept, ended or not, until it is idle like an
        active run: the session's next run seeds from it.

        Then, past ``LOOPGUARD_MAX_RUNS``, evict runs as ``RunExpiry.evictions`` orders them
        (ended, idle, then enforced ones; least recently active first), the same way."""
        runs, sessions, expiry = self.parts.runs, self.parts.sessions, self.parts.expiry
        now, cap = time.time(), self.settings.max_runs
        dropped: Counter[str] = Counter()
        evicted: Counter[str] = Counter()
        classes: dict[Any, str] = {}  # the runs kept: their eviction class
        held: dict[Any, tuple[Any, bool]] = {}  # and their state, and whether a session's latest
        written: set[TP] = set()
        # Between batches: exactly once, the deletions are committed here on their own (no
        # event's offsets carry them), and a half-published batch must not go with them.
        # Only runs of partitions active here: the table also holds standby copies of other
        # workers' runs (LOOPGUARD_STANDBY_REPLICAS), which their owners expire.
        owned = self.parts.app.assignor.assigned_actives()
        async with self.parts.commit_barrier:
            for run_id, state in list(runs.items()):
                if runs.changelog_tp(run_id, state) not in owned:
                    continue
                session_key = state.session_id.encode()
                latest = bool(session_key) and sessions.get(session_key) == run_id
                kept = latest and self.parts.processor.config_for(state.agent_id).session_scope
                active = state.status == ACTIVE or kept
                reason = expiry.reason(run_id, active, state.last_event_time, now)
                if reason:
                    written.add(runs.changelog_tp(run_id, state))  # and the session's, alike
                    del runs[run_id]
                    if latest:
                        del sessions[session_key]
                    expiry.forget(run_id)
                    dropped[reason] += 1
                elif cap > 0:
                    classes[run_id] = eviction_class(state, kept)
                    held[run_id] = (state, latest)
            for run_id, why in expiry.evictions(classes, cap):
                state, latest = held[run_id]
                written.add(runs.changelog_tp(run_id, state))
                del runs[run_id]
                if latest:
                    del sessions[state.session_id.encode()]
                expiry.forget(run_id)
                evicted[why] += 1
            await commit_outside_batches(self.parts.app, written)
        expiry.retain(set(runs.keys()))
        self.parts.metrics.set_runs_cap(cap)
        for why, n in evicted.items():
            self.parts.metrics.runs_evicted_for(why, n)
        if evicted and expiry.cap_warning_due(now):
            log.warning(
                "at the runs cap (LOOPGUARD_MAX_RUNS=%d): evicted %d runs (%s); %d runs in this "
                "worker's table (this warning at most once a minute)",
                cap,
                evicted.total(),
                ", ".join(f"{n} {why}" for why, n in sorted(evicted.items())),
                len(runs),
            )
        if dropped:
            log.info(
                "expired %d runs (%s); %d runs in this worker's table",
                dropped.total(),
                ", ".join(f"{n} {why}" for why, n in sorted(dropped.items())),
                len(runs),
            )

    async def sample_lag(self) -> None:
        metrics = self.parts.metrics
        await metrics.sample_consumer_lag(self.parts.app.consumer, self.settings.topics.events)
        metrics.set_runs(len(self.parts.runs))

    def health(self) -> dict[str, Any]:
        """/healthz: "stalled" (503) when events wait and none was taken in for a while: the
        worker is not guarding; "degraded" (200) when it guards but the audit trail lags or
        fails (decisions still flow; the audit agent catches up from the control topic).
        Read from what the worker keeps anyway (lag sampled every LAG_SAMPLE_SECONDS, the
        audit writer's last write, error and pending records)."""
        seen = self.parts.metrics.snapshot()
        lag, idle = seen["lag_total"], seen["last_event_age_seconds"]
        stalled = lag > 0 and (idle is None or idle > STALL_SECONDS)
        audit = self.parts.audit.health()
        control = self.parts.control_topic.get_topic_name()
        # Control records the audit agent has not read yet (exactly once, each partition's
        # last transaction marker counts too): its backlog beyond the write in progress.
        audit["unread"] = unread_records(self.parts.app.consumer, control)
        if stalled:
            status = "stalled"
        elif audit["status"] != "ok":
            status = "degraded"
        else:
            status = "ok"
        return {
            "status": status,
            "consumer_lag": lag,
            "last_event_age_seconds": idle,
            "broker_profile": self.settings.profile,
            "processing": {
                "status": "stalled" if stalled else "ok",
                "last_event_age_seconds": idle,
                "consumer_lag": lag,
            },
            "audit": audit,
        }

    async def announce(self) -> None:
        settings = self.settings
        log.info(
            "broker profile: %s (replication %d, min.insync.replicas %d, %s, producer batch %d "
            "bytes, fetch wait %d ms)",
            settings.profile,
            settings.replication,
            settings.min_insync_replicas,
            settings.processing_guarantee,
            settings.producer_max_batch,
            settings.fetch_max_wait_ms,
        )
        log.info("loopguard worker settings: %s", settings.redacted())
        log.info("detector core: %s", core_build())
        parts = self.parts  # every config change goes to the audit trail (issue 26)
        self.config_audit = start_config_audit(
            parts.overrides,
            parts.audit,
            parts.webhooks,
            parts.fleet or FleetConfig(),
            settings.config_file,
            settings.app_id,
        )
        self.parts.overrides.start()
        await asyncio.sleep(0)

    async def log_assignment(self, sender: faust.App, assigned: set[Any], **kwargs: Any) -> None:
        """One line per rebalance saying which events partitions this worker now owns."""
        events = self.settings.topics.events
        mine = sorted(tp.partition for tp in assigned if tp.topic == events)
        self.parts.metrics.retain_partitions(mine)
        log.info("events partitions assigned to this worker: %s", mine)
