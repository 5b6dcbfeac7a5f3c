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
from functools import cached_property, partial
from typing import Any

import faust
from mode import CrashingSupervisor

from streams.audit.config_changes import ConfigChangeRecorder
from streams.audit.writer import RecordRefused
from streams.core.engine import core_build
from streams.core.fleet import FleetConfig
from streams.observability.metrics import unread_records
from streams.service.batch import BatchOutput, BatchTopics, process_batch
from streams.service.control_audit import read_control
from streams.service.records import BatchContext
from streams.worker.checkpoint import Checkpoint
from streams.worker.config_audit import start_config_audit
from streams.worker.crash_exit import CrashExit
from streams.worker.fast_failover import note_written
from streams.worker.gc_tuning import freeze_start_up_objects
from streams.worker.parts import WorkerParts
from streams.worker.ready_batches import take_ready
from streams.worker.run_expiry import ExpirySweep
from streams.worker.writer_schemas import resolve_writer_schemas

log = logging.getLogger("loopguard.worker")

PARTITION_CACHE_SIZE = 65_536  # (topic, key) -> partition, emptied when full
LAG_SAMPLE_SECONDS = 5.0
STALL_SECONDS = 30.0  # events waiting and none applied for this long: not guarding


class WorkerAgents:
    """The agents' bodies; :meth:`register` attaches them to the app under stable names."""

    def __init__(self, parts: WorkerParts) -> None:
        self.parts = parts
        self.settings = parts.settings
        self.crashing: asyncio.Future | None = None  # held: a task nobody keeps can vanish
        self.partitions: dict[tuple[str, bytes], int] = {}  # see partition_for
        self.config_audit: ConfigChangeRecorder | None = None  # started by announce
        self.forged_records = 0  # control records the audit agent refused (issue 40)
        self.forged_logged = 0.0

    def register(self) -> None:
        """The role's agents (``settings.role``): the guarding agent and its timers (guard),
        the audit agents and webhooks (audit), or all of them."""
        app, parts, settings = self.parts.app, self.parts, self.settings
        # An agent that crashes takes the worker down (exit code 1) rather than leaving a
        # live process that guards nothing; its supervisor (compose, systemd) restarts it.
        # Faust's stop can hang after a crash (#324), so the crash also arms a deadline.
        crash = {"supervisor_strategy": CrashingSupervisor}
        exit_after = CrashExit(settings.crash_exit_seconds)
        agents: list[tuple[Any, str, Any]] = []
        if settings.guards:
            agents.append((parts.events_topic, "guard_runs", self.guard_runs))
        if settings.audits:
            agents.append((parts.control_topic, "audit_decisions", self.audit_decisions))
            agents.append((parts.deadletter_topic, "audit_dead_letters", self.audit_dead_letters))
        for topic, name, body in agents:
            app.agent(topic, name=name, **crash)(exit_after.guard(name, body))
        if settings.guards:
            app.timer(interval=settings.expiry_interval, name="expire_runs")(self.expire_runs)
            app.timer(interval=LAG_SAMPLE_SECONDS, name="sample_lag")(self.sample_lag)
            app.on_partitions_assigned.connect(self.log_assignment)
        app.task(self.announce)
        app.task(freeze_start_up_objects)  # after table recovery, once
        if settings.audits and parts.webhooks is not None:
            app.task(parts.webhooks.run)

    @cached_property
    def checkpoint(self) -> Checkpoint:
        parts = self.parts
        immediate: frozenset[str] = frozenset()
        if self.settings.control_delivery == "immediate":
            # decisions and watermarks, and the agent-to-agent sends ordered before them
            immediate = frozenset({self.batch_topics.control, self.batch_topics.agent_sends})
        ahead = frozenset({self.batch_topics.agent_sends})
        return Checkpoint(
            parts.app,
            parts.commit_barrier,
            self.delivery_failed,
            immediate,
            ahead,
            on_settled_round=parts.metrics.observe_settle_round,
        )

    @cached_property
    def expiry_sweep(self) -> ExpirySweep:
        return ExpirySweep(self.parts, self.checkpoint)

    @cached_property
    def batch_topics(self) -> BatchTopics:
        parts = self.parts
        return BatchTopics(
            events=self.settings.topics.events,
            control=parts.control_topic.get_topic_name(),
            deadletter=parts.deadletter_topic.get_topic_name(),
            changelog=parts.runs.changelog_topic.get_topic_name(),
            agent_sends=self.settings.topics.agent_sends,  # streams/worker/agent_cycles.py
        )

    @cached_property
    def batch_context(self) -> BatchContext:
        """What every batch function needs from this worker: its registry, the message
        limit and the producer's partitioner (cached per key)."""
        return BatchContext(
            self.parts.registry,
            self.partition_for,
            self.settings.max_message_bytes,
            keys=self.parts.keys,  # issue 40: signed events in, signed control records out
        )

    async def guard_runs(self, stream: faust.StreamT) -> None:
        """Guard the events in batches of what has queued up (:mod:`ready_batches`).

        A batch is decided by :func:`streams.service.batch.process_batch` (no Faust, no I/O:
        unknown writer schemas are looked up first) and finished by one checkpoint
        (:class:`streams.worker.checkpoint.Checkpoint`): its records go to the producer,
        its events are acked and, exactly once, its offsets are committed with its records
        as soon as the batch is done, so a read-committed gateway sees its decisions and
        watermarks one commit after the batch, not on Faust's timer.
        """
        settings, ages = self.settings, self.parts.metrics.stage_ages
        async for batch in take_ready(stream, settings.batch_size, settings.batch_window):
            messages = [event.message for event in batch]
            first = messages[0].timestamp if messages else None  # the batch's stage ages
            ages.observe("taken", first)
            await resolve_writer_schemas(self.parts, [m.value for m in messages])

            async def ack(batch: list[Any] = batch) -> None:
                for event in batch:
                    await stream.ack(event)

            await self.checkpoint.run(partial(self.guard_batch, messages), ack)
            ages.observe("published", first)

    async def guard_batch(self, messages: list[Any]) -> BatchOutput:
        """Decide a batch (:func:`process_batch`) and keep what it changed: run states and
        sessions in the tables, run expiry's clocks, metrics; re-keyed events re-sent. The
        records are the checkpoint's to send."""
        parts = self.parts
        started, now = time.perf_counter(), time.time()
        parts.metrics.observe_event_ages(now, [message.timestamp for message in messages])
        output = process_batch(
            messages,
            parts.processor,
            self.batch_context,
            self.batch_topics,
            now=now,
            per_run_watermarks=self.settings.watermarks == "per_run",
        )
        if messages:
            parts.metrics.stage_ages.observe("decided", messages[0].timestamp)
        runs, expiry = parts.runs, parts.expiry
        for write in output.state_writes:
            # Stored without the table's own changelog write (Faust's producer buffer sends
            # one message at a time); the checkpoint sends it with the batch's records.
            runs.data[write.key] = write.state
            note_written(runs.data, write.key, write.partition)
            expiry.touch(write.key, now)
        if output.newest_event_time_ms is not None:
            expiry.observe(output.newest_event_time_ms, now)
        for session_key, run_key in output.sessions.items():
            parts.sessions[session_key] = run_key
        for rekey in output.rekeys:  # acknowledged before the batch's offsets are committed
            await parts.rekeyer.send(
                self.settings.topics.events, rekey.key, rekey.value, rekey.headers
            )
        self.count_batch(output, len(messages), time.perf_counter() - started)
        return output

    def count_batch(self, output: BatchOutput, events: int, seconds: float) -> None:
        """Count a batch in the metrics: per kind, not per event."""
        metrics = self.parts.metrics
        for kind, count in output.event_kinds.items():
            metrics.observe_event(kind, count)
        for kind, count in output.dead_letter_kinds.items():
            metrics.observe_dead_letter(kind, count)
        metrics.observe_decisions(output.decisions)
        metrics.observe_loop_cost(output.loop_tokens, output.saved_tokens)  # issue 28
        if events:
            metrics.observe_latency(seconds / events, events)

    def partition_for(self, topic: str, key: bytes | None) -> int:
        """The producer's partition for ``key`` (murmur2, as the gateways' and Java's),
        remembered: a run's watermark and decisions are keyed alike batch after batch."""
        cached = self.partitions.get((topic, key)) if key is not None else None
        if cached is None:
            cached = self.parts.app.producer.key_partition(topic, key).partition
            if key is not None:
                if len(self.partitions) >= PARTITION_CACHE_SIZE:
                    self.partitions.clear()
                self.partitions[(topic, key)] = cached
        return cached

    def delivery_failed(self, exc: BaseException) -> None:
        """A decision, state or watermark the producer gave up on: stop the worker rather
        than guard on past it (its supervisor restarts it from the last commit). A commit
        already under way may still take the events' offsets; Faust's own sends had no
        check at all."""
        self.crashing = asyncio.ensure_future(self.parts.app.crash(exc))

    async def audit_decisions(self, stream: faust.StreamT) -> None:
        """Write every decision and run's progress to SQL in batches; retries until the
        database takes them. The batch is read by :func:`read_control` (this adapter moves
        bytes): a record that does not decode goes to the trail as a dead letter with its
        error, and the records after it are written as usual (issue 40)."""
        parts, settings = self.parts, self.settings
        async for batch in stream.take_events(settings.audit_batch, within=0.2):
            read = read_control(
                [event.message for event in batch],
                parts.keys,
                now=time.time(),
                max_message_bytes=settings.max_message_bytes,
            )
            for message, why in read.forged:
                self.forged_control(message, why)
            await parts.audit.write_dead_letters(read.dead_letters)
            # A decision the database refused is quarantined, not posted (issue 26).
            _, stored = await parts.audit.store_decisions(read.decisions)
            if parts.webhooks is not None:  # queues; never waits for an endpoint
                try:
                    await parts.webhooks.submit(stored)
                except RecordRefused as exc:  # the outbox refused them: the trail goes on
                    log.error("webhook outbox refused %d notices: %s", len(stored), exc.error)
            await parts.audit.write_progress(read.watermarks)  # `loopguard runs` shows it

    def forged_control(self, message: Any, why: str) -> None:
        """A control record no worker signed: kept out of the audit trail, one line each
        (at most one a second, the rest counted)."""
        self.forged_records += 1
        now = time.monotonic()
        if now - self.forged_logged >= 1.0:
            log.warning(
                "audit: ignoring a control record no worker signed (%s) at %s[%s]@%s; "
                "%d such records so far",
                why,
                message.topic,
                message.partition,
                message.offset,
                self.forged_records,
            )
            self.forged_logged = now

    async def audit_dead_letters(self, stream: faust.StreamT) -> None:
        async for event in stream.events():
            await self.parts.audit.write_dead_letter(event.value)

    async def expire_runs(self) -> None:
        """Run expiry's sweep (:class:`streams.worker.run_expiry.ExpirySweep`)."""
        await self.expiry_sweep.sweep()

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
        if not self.settings.audits:  # the guard role: no audit trail here
            return {
                "status": "stalled" if stalled else "ok",
                "role": self.settings.role,
                "consumer_lag": lag,
                "last_event_age_seconds": idle,
                "broker_profile": self.settings.profile,
            }
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
        body = {
            "status": status,
            "role": self.settings.role,
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
        if not self.settings.guards:  # the audit role guards nothing: no lag of its own
            del body["processing"]
        return body

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
        log.info("role: %s (consumer group %s)", settings.role, settings.group_id)
        parts = self.parts  # every config change goes to the audit trail (issue 26)
        if not settings.audits:  # the audit role's worker records them
            self.parts.overrides.start()
            return
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
