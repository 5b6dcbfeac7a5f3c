"""Loop incidents per batch (issue 28, :mod:`streams.core.incidents`): messages in; signals,
incident records and the signatures' new state out. No Faust, no I/O.

Data flow (the worker's adapter, :mod:`streams.worker.incidents`, runs each step as an agent
or a timer and moves the bytes)::

    <prefix>.events  ──failure_signals──┐  (failed results)
                                        ├─► <prefix>.incident-signals (key: signature,
    <prefix>.control ──decision_signals─┘    timestamp: the event time)
                                                      │
                          track_signals: the signature's window tallies and open incident
                          close_quiet (a timer): incidents whose quiet window has passed
                                                      │
                                           <prefix>.incidents (key: signature)

An incident closes once its quiet window has passed on either of two clocks
(:class:`IncidentClock`): event time (the newest signal taken, so a worker working through a
backlog closes what the events say is over, not what the wall clock says) and the wall clock
once no signal has come for a while (a worker that hears nothing more still closes them;
after a restart too, from the recovered table).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from streams.core.events import Decision, ToolResult
from streams.core.incident_config import IncidentConfig
from streams.core.incidents import (
    KEPT_WINDOWS,
    Incident,
    Signal,
    SignatureTallies,
    close,
    decision_signal,
    failure_signal,
    observe_signal,
)
from streams.service.dead_letter_records import (
    dead_letter_record,
    failure_text,
    send_dead_letter,
)
from streams.service.records import BatchContext, Message, OutRecord, Produced, TopicPartition
from streams.wire.avro import DeadLetterRecord, decode_control
from streams.wire.errors import CodecError
from streams.wire.incident_codec import (
    decode_incident,
    decode_signal,
    encode_incident,
    encode_signal,
)

log = logging.getLogger("loopguard.incidents")

# A signal may be this late (event time behind the newest taken, or the wall clock past its
# window) and still keep an incident open: gateways' clocks and the forwarding hop.
LATENESS_MS = 2_000
Load = Callable[[bytes], bytes | None]  # a table's stored bytes of a key, None if none


@dataclass(frozen=True)
class IncidentTopics:
    signals: str
    incidents: str
    deadletter: str = ""  # where an unreadable signal goes ("": logged and skipped)


@dataclass
class IncidentClock:
    """When a quiet window has passed: on event time, once a signal ``LATENESS_MS`` past it
    was taken (the watermark never runs ahead of the wall clock), or on the wall clock, once
    it is ``LATENESS_MS`` past and no signal came for as long. A clock that has taken nothing
    yet (a worker just started or restarted) counts as quiet from its first look."""

    watermark_ms: int = 0
    last_signal_ms: int | None = None  # wall clock when a signal was last taken

    def observe(self, event_time_ms: int, now_ms: int) -> None:
        self.watermark_ms = max(self.watermark_ms, min(event_time_ms, now_ms))
        self.last_signal_ms = now_ms

    def passed(self, moment_ms: int, now_ms: int) -> bool:
        if self.watermark_ms - LATENESS_MS >= moment_ms:
            return True
        if self.last_signal_ms is None:
            self.last_signal_ms = now_ms
        quiet = now_ms - self.last_signal_ms >= LATENESS_MS
        return quiet and now_ms - LATENESS_MS >= moment_ms


@dataclass
class IncidentBatch(Produced):
    """What a batch of signals (or a look at the clock) produced: incident records (and
    offsets), the incidents published, and the signatures' new state, each a table's key ->
    its bytes, None to delete it."""

    published: list[Incident] = field(default_factory=list)
    tally_writes: dict[bytes, bytes | None] = field(default_factory=dict)
    open_writes: dict[bytes, bytes | None] = field(default_factory=dict)


def failure_signals(
    messages: Sequence[Message],
    context: BatchContext,
    config: IncidentConfig,
    topic: str,
) -> Produced:
    """The signals of a batch of events-topic messages (its failed results) keyed by their
    signature. What does not decode is the guarding agent's to dead-letter: skipped here."""

    def signal_of(value: bytes) -> Signal | None:
        try:
            event = context.decode(value)
        except CodecError:
            return None
        return failure_signal(event) if isinstance(event, ToolResult) else None

    return forward(messages, signal_of, context, config, topic)


def decision_signals(
    messages: Sequence[Message],
    context: BatchContext,
    config: IncidentConfig,
    topic: str,
) -> Produced:
    """The signals of a batch of control-topic messages (loop decisions) keyed by their
    signature. What does not decode is the audit agent's to report: skipped here."""
    return forward(messages, _decision_signal, context, config, topic)


def _decision_signal(value: bytes) -> Signal | None:
    try:
        decoded = decode_control(value)
    except CodecError:
        return None
    return decision_signal(decoded) if isinstance(decoded, Decision) else None


def forward(
    messages: Sequence[Message],
    signal_of: Callable[[bytes], Signal | None],
    context: BatchContext,
    config: IncidentConfig,
    topic: str,
) -> Produced:
    """Each message's signal, if it has one, on ``topic`` keyed by its signature (at its
    event time); all messages consumed, none signalled when incidents are off."""
    out = Produced()
    for message in messages:
        source = out.consumed(message)
        try:
            signal = signal_of(message.value or b"") if config.enabled else None
        except Exception as exc:  # noqa: BLE001 - one record must never stop the forwarding
            # The record's own consumer (guarding, audit) dead-letters it; skipped here.
            log.warning(
                "incidents: skipping %s[%s]@%s: %s",
                message.topic, message.partition, message.offset, failure_text(exc),
            )  # fmt: skip
            continue
        if signal is not None:
            key = signal.signature.encode()
            partition = context.partition_for(topic, key)
            value = encode_signal(signal)
            out.add(OutRecord(topic, key, value, partition, source, signal.event_time))
    return out


def track_signals(
    messages: Sequence[Message],
    load_tallies: Load,
    load_open: Load,
    config: IncidentConfig,
    clock: IncidentClock,
    context: BatchContext,
    topics: IncidentTopics,
    now_ms: int,
) -> IncidentBatch:
    """Count each signal in its signature's window and open, grow or close its incident
    (:func:`~streams.core.incidents.observe_signal`); the incident records to publish and
    every touched signature's tallies and open incident, once."""
    out = IncidentBatch()
    tallies: dict[bytes, SignatureTallies] = {}
    opened: dict[bytes, Incident | None] = {}
    stored: dict[bytes, Incident | None] = {}  # each signature's open incident before
    for message in messages:
        source = out.consumed(message)
        try:
            signal = decode_signal(message.value or b"", max_size=context.max_message_bytes)
            if not config.enabled:
                continue
            key = signal.signature.encode()
            if key not in tallies:
                tallies[key] = SignatureTallies.from_dict(_json(load_tallies(key)))
                opened[key] = stored[key] = _incident(load_open(key))
            step = observe_signal(tallies[key], opened[key], signal, config)
        except Exception as exc:  # noqa: BLE001 - one signal must never stop the windows
            unreadable(out, message, f"unreadable incident signal: {failure_text(exc)}",
                       context, topics, now_ms)  # fmt: skip
            continue
        clock.observe(signal.event_time, now_ms)
        opened[key] = step.open
        for incident in step.published:
            publish(out, incident, context, topics, source)
    for key, kept in tallies.items():
        out.tally_writes[key] = _dumps(kept.to_dict())
        now_open = opened[key]
        if now_open != stored[key]:
            out.open_writes[key] = None if now_open is None else _dumps(now_open.to_dict())
    return out


def close_quiet(
    opened: Iterable[tuple[bytes, bytes]],
    tallies: Iterable[tuple[bytes, bytes]],
    config: IncidentConfig,
    clock: IncidentClock,
    context: BatchContext,
    topics: IncidentTopics,
    now_ms: int,
) -> IncidentBatch:
    """Close the open incidents (key, stored bytes) whose quiet window has passed on
    ``clock``, and forget the tallies whose newest window is ``KEPT_WINDOWS`` behind it."""
    out = IncidentBatch()
    for key, value in opened:
        incident = _incident(value)
        if incident is not None and clock.passed(incident.closes_at, now_ms):
            out.open_writes[key] = None
            source = (topics.signals, context.partition_for(topics.signals, key))
            publish(out, close(incident), context, topics, source)
    for key, value in tallies:
        kept = SignatureTallies.from_dict(_json(value))
        if clock.passed(
            kept.newest() + KEPT_WINDOWS * (kept.window_ms or config.window_ms), now_ms
        ):
            out.tally_writes[key] = None
    return out


def publish(
    out: IncidentBatch,
    incident: Incident,
    context: BatchContext,
    topics: IncidentTopics,
    source: TopicPartition,
) -> None:
    out.published.append(incident)
    key = incident.signature.encode()
    partition = context.partition_for(topics.incidents, key)
    out.add(OutRecord(topics.incidents, key, encode_incident(incident), partition, source))


def unreadable(
    out: Produced,
    message: Message,
    error: str,
    context: BatchContext,
    topics: IncidentTopics,
    now_ms: int,
) -> None:
    """Dead-letter a record this pipeline cannot read (issue 40), or log it without a topic."""
    if topics.deadletter:
        send_dead_letter(out, message, error, topics.deadletter, context.partition_for,
                         context.max_message_bytes, now_ms / 1000)  # fmt: skip
    else:
        log.warning("skipping %s[%s]@%s: %s", message.topic, message.partition,
                    message.offset, error)  # fmt: skip


@dataclass
class IncidentRecords:
    """A batch of incidents-topic records for the audit trail: the incidents, and those that
    did not read as one, as dead letters with their error."""

    incidents: list[Incident] = field(default_factory=list)
    dead_letters: list[DeadLetterRecord] = field(default_factory=list)


def read_incidents(
    messages: Sequence[Message], *, now: float, max_message_bytes: int
) -> IncidentRecords:
    """A batch of incidents-topic records, each failing alone (issue 40): an unreadable one,
    whatever the exception, is kept as a dead letter and the rest are read."""
    out = IncidentRecords()
    for message in messages:
        try:
            out.incidents.append(decode_incident(message.value or b"", max_size=max_message_bytes))
        except Exception as exc:  # noqa: BLE001 - one record must never stop the trail
            error = f"unreadable incident record: {failure_text(exc)}"
            out.dead_letters.append(dead_letter_record(message, error, max_message_bytes, now))
    return out


def _json(value: bytes | None) -> dict | None:
    return None if value is None else json.loads(value)


def _incident(value: bytes | None) -> Incident | None:
    data = _json(value)
    return None if data is None else Incident.from_dict(data)


def _dumps(data: dict) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
