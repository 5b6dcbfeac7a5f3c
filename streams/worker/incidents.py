"""Loop incidents in the worker (issue 28): the per-batch steps of
:mod:`streams.service.incidents` as Faust agents and a timer, over two tables keyed so that
one partition owns a signature (``incident-tallies``: its recent windows' runs and agents;
``incidents-open``: its open incident; both changelog-backed).

The signals and incidents are sent by a plain producer outside any transaction (as re-keyed
events are, streams/kafka/rekey.py): a signal or incident delivered twice changes nothing
(tallies are sets, the SQL write merges, the webhook outbox is keyed by incident id), and
the guarding agent's exactly-once batches never wait for them. The agents are registered
only when the fleet's config has ``incidents.enabled`` at start; switching it off at run
time stops them counting, switching it on needs a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import faust
from faust.types import TP
from kafka import KafkaProducer
from mode import CrashingSupervisor

from streams.audit.incidents import record_incidents
from streams.core.incident_config import IncidentConfig
from streams.core.incidents import OPEN, Incident
from streams.observability.incident_metrics import IncidentMetrics
from streams.service.incidents import (
    IncidentBatch,
    IncidentClock,
    IncidentTopics,
    close_quiet,
    decision_signals,
    failure_signals,
    read_incidents,
    track_signals,
)
from streams.service.records import BatchContext, OutRecord, Produced
from streams.settings import Settings
from streams.worker.crash_exit import CrashExit
from streams.worker.exactly_once import commit_outside_batches
from streams.worker.parts import WorkerParts
from streams.worker.ready_batches import take_ready
from streams.worker.writer_schemas import resolve_writer_schemas

log = logging.getLogger("loopguard.incidents")

CLOSE_CHECK_SECONDS = 1.0
FORWARD_BATCH = 500
FORWARD_WITHIN = 0.05


class PlainSender:
    """A kafka-python producer outside any transaction; a batch is sent and acknowledged
    before the messages it came from are acked (at least once)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer: KafkaProducer | None = None

    async def send(self, records: Sequence[OutRecord]) -> None:
        if records:
            await asyncio.to_thread(self.send_and_wait, records)

    def send_and_wait(self, records: Sequence[OutRecord]) -> None:
        if self.producer is None:
            self.producer = KafkaProducer(
                bootstrap_servers=self.settings.bootstrap_servers,
                acks="all",
                linger_ms=2,
                **self.settings.kafka_client_options(),
            )
        sent = [
            self.producer.send(
                r.topic, key=r.key, value=r.value, partition=r.partition, timestamp_ms=r.timestamp
            )
            for r in records
        ]
        for future in sent:
            future.get(timeout=60)


class IncidentAgents:
    """The incident agents, tables and timer; :meth:`register` attaches them to the app."""

    def __init__(self, parts: WorkerParts, context: BatchContext) -> None:
        self.parts = parts
        self.context = context
        settings = parts.settings
        app = parts.app
        raw: dict[str, Any] = {
            "key_type": bytes,
            "value_type": bytes,
            "key_serializer": "raw",
            "value_serializer": "raw",
        }
        self.signals_topic = app.topic(settings.topics.incident_signals, **raw)
        self.incidents_topic = app.topic(settings.topics.incidents, **raw)
        self.topics = IncidentTopics(
            settings.topics.incident_signals,
            settings.topics.incidents,
            deadletter=parts.deadletter_topic.get_topic_name(),  # unreadable signals (issue 40)
        )
        self.sender = PlainSender(settings)
        self.metrics = IncidentMetrics(parts.metrics.registry)
        self.clock = IncidentClock()
        # signature (bytes) -> its recent windows' tallies (JSON), on the signature's partition
        self.tallies = self.table("incident-tallies")
        # signature (bytes) -> the open incident (JSON), on the partition of its signature
        self.opened = self.table("incidents-open")

    def table(self, name: str) -> Any:
        settings, app = self.parts.settings, self.parts.app
        table = app.Table(
            name,
            default=None,
            key_type=bytes,
            value_type=bytes,
            use_partitioner=True,
            partitions=settings.partitions,
        )
        setattr(table, "key_serializer", "raw")  # noqa: B010 - not on TableT's type
        setattr(table, "value_serializer", "raw")  # noqa: B010
        return table

    def register(self) -> None:
        app, parts = self.parts.app, self.parts
        crash: dict[str, Any] = {"supervisor_strategy": CrashingSupervisor}
        exit_after = CrashExit(parts.settings.crash_exit_seconds)
        for topic, name, body in (
            (parts.events_topic, "incident_failures", self.forward_failures),
            (parts.control_topic, "incident_decisions", self.forward_decisions),
            (self.signals_topic, "incident_windows", self.track),
            (self.incidents_topic, "record_incidents", self.record),
        ):
            app.agent(topic, name=name, **crash)(exit_after.guard(name, body))
        app.timer(interval=CLOSE_CHECK_SECONDS, name="close_quiet_incidents")(self.close_quiet)

    def config(self) -> IncidentConfig:
        """The fleet's current settings (the global block's; run-time overrides included)."""
        return self.parts.processor.config_for("").incidents

    async def batches(
        self, stream: faust.StreamT, step: Callable[[list[Any]], Awaitable[Produced]]
    ) -> None:
        """Each batch of ``stream`` through ``step`` (messages in, records out); its records
        sent and acknowledged, then its messages acked (at least once)."""
        async for batch in take_ready(stream, FORWARD_BATCH, FORWARD_WITHIN):
            output = await step([event.message for event in batch])
            await self.sender.send(output.all_records())
            for event in batch:
                await stream.ack(event)

    # -- forwarding: re-key by signature -------------------------------------------------

    async def forward_failures(self, stream: faust.StreamT) -> None:
        await self.batches(stream, self.failure_signals)

    async def failure_signals(self, messages: list[Any]) -> Produced:
        await resolve_writer_schemas(self.parts, [m.value for m in messages])
        return failure_signals(messages, self.context, self.config(), self.topics.signals)

    async def forward_decisions(self, stream: faust.StreamT) -> None:
        await self.batches(stream, self.decision_signals)

    async def decision_signals(self, messages: list[Any]) -> Produced:
        return decision_signals(messages, self.context, self.config(), self.topics.signals)

    # -- the windows ---------------------------------------------------------------------

    async def track(self, stream: faust.StreamT) -> None:
        """Count each signal in its window; open, grow or close its signature's incident."""
        await self.batches(stream, self.track_batch)

    async def track_batch(self, messages: list[Any]) -> IncidentBatch:
        output = track_signals(
            messages,
            self.tallies.get,
            self.opened.get,
            self.config(),
            self.clock,
            self.context,
            self.topics,
            now_ms(),
        )
        self.store(output)
        self.log_published(output.published)
        return output

    def store(self, output: IncidentBatch) -> set[TP]:
        """The batch's table writes, through the tables (their changelogs); the changelog
        partitions written."""
        written: set[TP] = set()
        for table, writes in (
            (self.tallies, output.tally_writes),
            (self.opened, output.open_writes),
        ):
            changelog = table.changelog_topic.get_topic_name()
            for key, value in writes.items():
                written.add(TP(changelog, self.context.partition_for(changelog, key)))
                if value is None:
                    if key in table:
                        del table[key]
                else:
                    table[key] = value
        return written

    def log_published(self, incidents: list[Incident]) -> None:
        for incident in incidents:
            log.info(
                "incident %s %s: %s, %d runs of %d agents",
                incident.incident_id,
                incident.status,
                incident.label[:120],
                len(incident.runs),
                len(incident.agents),
            )

    async def close_quiet(self) -> None:
        """Close the incidents whose quiet window has passed (:class:`IncidentClock`), and
        forget stale tallies, on the signal partitions this worker owns (a standby copy is
        its owner's)."""
        opened, tallies = self.owned(self.opened), self.owned(self.tallies)
        output = close_quiet(
            opened, tallies, self.config(), self.clock, self.context, self.topics, now_ms()
        )
        if output.open_writes or output.tally_writes:
            async with self.parts.commit_barrier:
                written = self.store(output)
                await commit_outside_batches(self.parts.app, written)
            self.log_published(output.published)
            await self.sender.send(output.all_records())
        self.metrics.set_open(len(opened) - len(output.published))

    def owned(self, table: Any) -> list[tuple[bytes, bytes]]:
        """The items of ``table`` on signal partitions actively assigned here."""
        app, topic = self.parts.app, self.topics.signals
        actives = app.assignor.assigned_actives()
        partition_for = self.context.partition_for
        return [
            (key, value)
            for key, value in list(table.items())
            if TP(topic, partition_for(topic, key)) in actives
        ]

    # -- the record ----------------------------------------------------------------------

    async def record(self, stream: faust.StreamT) -> None:
        """Incidents into SQL (idempotent), openings to the webhooks (once), the counter."""
        parts = self.parts
        async for batch in stream.take_events(100, within=0.2):
            read = read_incidents(
                [event.message for event in batch],
                now=time.time(),
                max_message_bytes=parts.settings.max_message_bytes,
            )
            await parts.audit.write_dead_letters(read.dead_letters)  # unreadable (issue 40)
            incidents = read.incidents
            if not incidents:
                continue
            new = await parts.audit.run("incidents", partial(record_incidents, incidents=incidents))
            self.metrics.recorded_opening(len(new))
            if parts.webhooks is not None:
                await parts.webhooks.submit_incidents([i for i in incidents if i.status == OPEN])


def now_ms() -> int:
    return int(time.time() * 1000)


def register_incidents(parts: WorkerParts, context: BatchContext) -> IncidentAgents | None:
    """The incident agents when the fleet's config turns incidents on, else None."""
    startup = parts.processor.config_for("").incidents
    if not startup.enabled:
        log.info("loop incidents off (tools.loopDetection.incidents.enabled is not true)")
        return None
    agents = IncidentAgents(parts, context)
    agents.register()
    log.info(
        "loop incidents on: %d runs of %d agents sharing a signature within %d s",
        startup.min_runs,
        startup.min_agents,
        startup.window_seconds,
    )
    return agents
