"""Loop incidents in the worker (issue 28): the pure steps of :mod:`streams.core.incidents`
over Faust tables, keyed so that one partition owns a signature.

Data flow::

    <prefix>.events  ──incident_failures──┐  (failed results)
                                          ├─► <prefix>.incident-signals (key: signature,
    <prefix>.control ──incident_decisions─┘    timestamp: the event time)
                                                        │
                        incident_windows: windowed table (tumbling, changelog-backed),
                        open-incidents table; close_quiet_incidents timer
                                                        │
                                             <prefix>.incidents (key: signature)
                                                        │
                        record_incidents ──► SQL (incidents), webhook (once), metrics

The signals and incidents are sent by a plain producer outside any transaction (as re-keyed
events are, streams/kafka/rekey.py): a signal or incident delivered twice changes nothing
(tallies are sets, the SQL write merges, the webhook outbox is keyed by incident id), and
the guarding agent's exactly-once batches never wait for them. The agents are registered
only when the fleet's config has ``incidents.enabled`` at start; switching it off at run
time stops them counting, switching it on needs a restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any

import faust
from faust.types import TP
from kafka import KafkaProducer
from mode import CrashingSupervisor

from streams.audit.incidents import record_incidents
from streams.core.events import AgentEvent, Decision, ToolResult
from streams.core.incident_config import IncidentConfig
from streams.core.incidents import (
    OPEN,
    Incident,
    Signal,
    WindowTally,
    apply_signal,
    close,
    decision_signal,
    due_to_close,
    failure_signal,
    window_start,
)
from streams.observability.incident_metrics import IncidentMetrics
from streams.settings import Settings
from streams.wire.avro import decode_control, decode_event
from streams.wire.errors import CodecError, UnknownSchemaError
from streams.wire.incident_codec import (
    decode_incident,
    decode_signal,
    encode_incident,
    encode_signal,
)
from streams.worker.crash_exit import CrashExit
from streams.worker.exactly_once import commit_outside_batches
from streams.worker.parts import WorkerParts

log = logging.getLogger("loopguard.incidents")

# A signal may reach its partition this long after the wall clock passed its window's end
# and still keep an incident open (gateways' clocks and the forwarding hop).
LATENESS_MS = 2_000
CLOSE_CHECK_SECONDS = 1.0
FORWARD_BATCH = 500
OutRecord = tuple[bytes, bytes, int | None]  # key, value, timestamp (ms; None: now)


class PlainSender:
    """A kafka-python producer outside any transaction; a batch is sent and acknowledged
    before the messages it came from are acked (at least once)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer: KafkaProducer | None = None

    async def send(self, topic: str, records: Sequence[OutRecord]) -> None:
        if records:
            await asyncio.to_thread(self.send_and_wait, topic, records)

    def send_and_wait(self, topic: str, records: Sequence[OutRecord]) -> None:
        if self.producer is None:
            self.producer = KafkaProducer(
                bootstrap_servers=self.settings.bootstrap_servers,
                acks="all",
                linger_ms=2,
                **self.settings.kafka_client_options(),
            )
        sent = [
            self.producer.send(topic, key=key, value=value, timestamp_ms=ts)
            for key, value, ts in records
        ]
        for future in sent:
            future.get(timeout=60)


class IncidentAgents:
    """The incident agents, tables and timer; :meth:`register` attaches them to the app."""

    def __init__(self, parts: WorkerParts, startup: IncidentConfig) -> None:
        self.parts = parts
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
        self.sender = PlainSender(settings)
        self.metrics = IncidentMetrics(parts.metrics.registry)
        window = startup.window_seconds
        # signature -> {"window": start ms, "runs": [...], "agents": [...]}, per tumbling
        # window of the signals' timestamps (their event time); on the signal's partition.
        self.windows = (
            app.Table(
                "incident-windows",
                default=dict,
                key_type=str,
                partitions=settings.partitions,
            )
            .tumbling(window, expires=timedelta(seconds=3 * window))
            .relative_to_stream()
        )
        # signature (bytes) -> the open incident (JSON), on the partition of its signature
        self.opened = app.Table(
            "incidents-open",
            default=None,
            key_type=bytes,
            value_type=bytes,
            use_partitioner=True,
            partitions=settings.partitions,
        )
        setattr(self.opened, "key_serializer", "raw")  # noqa: B010 - not on TableT's type
        setattr(self.opened, "value_serializer", "raw")  # noqa: B010

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

    # -- forwarding: re-key by signature -------------------------------------------------

    async def forward_failures(self, stream: faust.StreamT) -> None:
        async for batch in stream.take(FORWARD_BATCH, within=0.05):
            if not self.config().enabled:
                continue
            signals = []
            for value in batch:
                event = await self.decode(value)
                if isinstance(event, ToolResult) and (signal := failure_signal(event)):
                    signals.append(signal)
            await self.forward(signals)

    async def forward_decisions(self, stream: faust.StreamT) -> None:
        async for batch in stream.take(FORWARD_BATCH, within=0.05):
            if not self.config().enabled:
                continue
            signals = []
            for value in batch:
                try:
                    message = decode_control(value)
                except CodecError:
                    continue  # the audit agent logs it
                if isinstance(message, Decision) and (signal := decision_signal(message)):
                    signals.append(signal)
            await self.forward(signals)

    async def decode(self, value: bytes) -> AgentEvent | None:
        """An event, or None for what the guarding agent dead-letters."""
        parts, limit = self.parts, self.parts.settings.max_message_bytes
        try:
            return decode_event(value, parts.registry, max_size=limit)
        except UnknownSchemaError as exc:
            if parts.schema_topic.known_missing(exc.fingerprint):
                return None
            if not await asyncio.to_thread(parts.schema_topic.resolve, exc.fingerprint):
                return None
        except CodecError:
            return None
        try:
            return decode_event(value, parts.registry, max_size=limit)
        except CodecError:
            return None

    async def forward(self, signals: list[Signal]) -> None:
        records: list[OutRecord] = [
            (s.signature.encode(), encode_signal(s), s.event_time) for s in signals
        ]
        await self.sender.send(self.signals_topic.get_topic_name(), records)

    # -- the windows ---------------------------------------------------------------------

    async def track(self, stream: faust.StreamT) -> None:
        """Count each signal in its window; open, grow or close its signature's incident."""
        async for event in stream.events():
            try:
                signal = decode_signal(event.value)
            except CodecError as exc:
                log.warning("skipping an unreadable incident signal: %s", exc)
                continue
            config = self.config()
            if config.enabled:
                await self.publish(self.apply(signal, config))

    def apply(self, signal: Signal, config: IncidentConfig) -> list[Incident]:
        key = signal.signature
        start = window_start(signal.event_time, config.window_ms)
        stored = self.windows[key].value()
        # A window of another size (windowSeconds changed at run time) starts afresh.
        same = isinstance(stored, dict) and stored.get("window") == start
        tally = (WindowTally.from_dict(stored) if same else WindowTally()).add(signal)
        self.windows[key] = {"window": start, **tally.to_dict()}
        current = self.load(key)
        step = apply_signal(current, tally, signal, config)
        if step.open is None and current is not None:
            del self.opened[key.encode()]
        elif step.open is not None and step.open != current:
            self.opened[key.encode()] = json.dumps(step.open.to_dict()).encode()
        return step.published

    def load(self, signature: str) -> Incident | None:
        stored = self.opened.get(signature.encode())
        return None if stored is None else Incident.from_dict(json.loads(stored))

    async def publish(self, incidents: list[Incident]) -> None:
        for incident in incidents:
            log.info(
                "incident %s %s: %s (%s %s), %d runs of %d agents",
                incident.incident_id,
                incident.status,
                incident.tool,
                incident.kind,
                incident.detail[:80],
                len(incident.runs),
                len(incident.agents),
            )
        records: list[OutRecord] = [
            (i.signature.encode(), encode_incident(i), None) for i in incidents
        ]
        await self.sender.send(self.incidents_topic.get_topic_name(), records)

    async def close_quiet(self) -> None:
        """Close the incidents whose quiet window has passed (wall clock, minus lateness),
        on the signal partitions this worker owns (a standby copy is its owner's to close)."""
        now = int(time.time() * 1000) - LATENESS_MS
        owned = self.owned()
        due = [
            close(incident)
            for key, value in list(self.opened.items())
            if key in owned and due_to_close(incident := Incident.from_dict(json.loads(value)), now)
        ]
        if due:
            app = self.parts.app
            changelog = self.opened.changelog_topic.get_topic_name()
            written = set()
            async with self.parts.commit_barrier:
                for incident in due:
                    key = incident.signature.encode()
                    written.add(TP(changelog, app.producer.key_partition(changelog, key).partition))
                    del self.opened[key]
                await commit_outside_batches(app, written)
            await self.publish(due)
        self.metrics.set_open(len(owned) - len(due))

    def owned(self) -> set[bytes]:
        """Keys of the open-incidents table on signal partitions actively assigned here."""
        app, topic = self.parts.app, self.signals_topic.get_topic_name()
        actives = app.assignor.assigned_actives()
        return {
            key
            for key in list(self.opened.keys())
            if TP(topic, app.producer.key_partition(topic, key).partition) in actives
        }

    # -- the record ----------------------------------------------------------------------

    async def record(self, stream: faust.StreamT) -> None:
        """Incidents into SQL (idempotent), openings to the webhooks (once), the counter."""
        parts = self.parts
        async for batch in stream.take(100, within=0.2):
            incidents = []
            for value in batch:
                try:
                    incidents.append(decode_incident(value))
                except CodecError as exc:
                    log.warning("skipping an unreadable incident record: %s", exc)
            if not incidents:
                continue
            new = await parts.audit.run("incidents", partial(record_incidents, incidents=incidents))
            self.metrics.recorded_opening(len(new))
            if parts.webhooks is not None:
                await parts.webhooks.submit_incidents([i for i in incidents if i.status == OPEN])


def register_incidents(parts: WorkerParts) -> IncidentAgents | None:
    """The incident agents when the fleet's config turns incidents on, else None."""
    startup = parts.processor.config_for("").incidents
    if not startup.enabled:
        log.info("loop incidents off (tools.loopDetection.incidents.enabled is not true)")
        return None
    agents = IncidentAgents(parts, startup)
    agents.register()
    log.info(
        "loop incidents on: %d runs of %d agents sharing a signature within %d s",
        startup.min_runs,
        startup.min_agents,
        startup.window_seconds,
    )
    return agents
