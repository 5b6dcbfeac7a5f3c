"""One batch of events-topic messages in; everything the worker must write and commit out.

No Faust, no Kafka, no I/O: the worker's adapter (:mod:`streams.worker.agents`) resolves
unknown writer schemas before calling :func:`process_batch`, then stores the state writes in
its table, sends the records and commits the offsets (:mod:`streams.worker.exactly_once`).
Everything per event (decoding, the processor, dead letters, re-keys, the counts metrics
need) happens here in one pass, and everything per run (its state, its watermark) once per
batch, so the per-event cost is the detector's and the codec's, not the runtime's.

Records are grouped by destination (topic, partition) in the order they must reach it: an
event's decisions in event order, then each touched run's state (changelog) and watermark
(control; one RunWatermarks record per partition) after every decision of the batch. Each
record names its *source*: the events partition whose offsets it is committed with (exactly
once, its transaction).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from streams.core.agent_cycles import cycle_key, is_send_call
from streams.core.events import Decision, event_kind
from streams.core.operator_command import COMMAND_KIND, RUN_SCOPE
from streams.core.run_state import RunState
from streams.service.dead_letter_records import (
    failure_text,
    send_dead_letter,
)
from streams.service.processor import EventProcessor
from streams.service.records import (
    BatchContext,
    Message,
    OutRecord,
    Partitioner,
    Produced,
    TopicPartition,
)
from streams.wire.avro import (
    DeadLetterRecord,
    RunWatermark,
    encode_decision,
    encode_watermark,
    encode_watermark_chunks,
)
from streams.wire.errors import CodecError
from streams.wire.operator_codec import decode_command, is_command
from streams.wire.signing import BAD_SIGNATURE, UNKNOWN_GATEWAY, UNSIGNED
from streams.wire.single_object import HEADER_SIZE, MARKER

log = logging.getLogger("loopguard.worker")


@dataclass(frozen=True, slots=True)
class StateWrite:
    """A run's state after the batch, to store in the table (its changelog record is in
    :attr:`BatchOutput.records`), and the changelog partition that record goes to (its
    events' partition)."""

    key: bytes
    state: RunState
    partition: int


@dataclass(frozen=True, slots=True)
class Rekey:
    """A message published under the wrong key, to re-send under ``key``."""

    key: bytes
    value: bytes
    source: TopicPartition
    headers: tuple[tuple[str, bytes], ...] = ()  # its signature goes along


@dataclass(frozen=True)
class BatchTopics:
    """Where the batch's records go."""

    events: str
    control: str
    deadletter: str
    changelog: str
    # send calls forwarded to the loops-between-agents agent (issue 28); "" forwards none
    agent_sends: str = ""


@dataclass
class BatchOutput(Produced):
    """What one batch produced (its records and offsets, :class:`Produced`); the adapter
    writes, sends and commits it in this order: state writes and sessions to the tables,
    re-keys (acknowledged), records, offsets."""

    state_writes: list[StateWrite] = field(default_factory=list)
    sessions: dict[bytes, bytes] = field(default_factory=dict)  # session id -> latest run
    rekeys: list[Rekey] = field(default_factory=list)
    dead_letters: list[DeadLetterRecord] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    event_kinds: Counter[str] = field(default_factory=Counter)
    dead_letter_kinds: Counter[str] = field(default_factory=Counter)  # metrics' kinds
    newest_event_time_ms: int | None = None  # of the applied events (run expiry's clock)
    loop_tokens: int = 0  # tokens looping runs reported in this batch (issue 28, /metrics)
    saved_tokens: int = 0  # saved-tokens estimates taken in this batch


def state_routing_key(run_key: bytes, state: RunState) -> bytes:
    """The key a run's state is partitioned by: its session id when it has one, else its run
    id, so the state lives on its events' partition (the topics are co-partitioned)."""
    return state.session_id.encode() or run_key


def writer_fingerprint(value: bytes | None) -> bytes | None:
    """The writer-schema fingerprint of a single-object encoded message, or None when the
    message is not framed as one (it is dead-lettered by the decoder)."""
    if value is None or len(value) < HEADER_SIZE or not value.startswith(MARKER):
        return None
    return bytes(value[len(MARKER) : HEADER_SIZE])


def process_batch(
    messages: Sequence[Message],
    processor: EventProcessor,
    context: BatchContext,
    topics: BatchTopics,
    *,
    now: float,
    per_run_watermarks: bool = False,
) -> BatchOutput:
    """Decide a batch: per event what :meth:`EventProcessor.apply` says, per run its state
    and watermark once. The events decode with ``context`` (resolve unknown writer schemas
    first; bad input is dead-lettered) and every record goes to the partition its
    partitioner gives; ``now`` is wall-clock seconds (dead letters' time). The watermarks go
    out as one RunWatermarks record per control partition (and source), or with
    ``per_run_watermarks`` one RunWatermark record per run, for gateways that know no other."""
    out = BatchOutput()
    control, partition_for = topics.control, context.partition_for
    max_message_bytes = context.max_message_bytes
    newest = -1
    for message in messages:
        source = out.consumed(message)
        value = message.value or b""
        if is_command(value):  # an operator's release or abort (issue 43)
            take_command(out, message, source, processor, context, topics, now)
            continue
        try:
            event = context.decode(value)
        except CodecError as exc:
            out.dead_letter_kinds[exc.kind] += 1
            dead_letter(out, message, str(exc), topics, partition_for, max_message_bytes, now)
            continue
        except Exception as exc:  # noqa: BLE001 - issue 40: no record ends the worker
            out.dead_letter_kinds["undecodable"] += 1
            dead_letter(out, message, f"undecodable event: {failure_text(exc)}", topics,
                        partition_for, max_message_bytes, now)  # fmt: skip
            continue
        refused = unsigned(context, event.envelope.gateway_id, message, value)
        if refused:  # issue 40: not its gateway's, by its signature
            out.dead_letter_kinds[refused.split(":", 1)[0]] += 1
            dead_letter(out, message, refused, topics, partition_for, max_message_bytes, now)
            continue
        out.event_kinds[event_kind(event)] += 1
        outcome = processor.apply(message.key, event)
        if outcome.dead_letter is not None:
            out.dead_letter_kinds[outcome.dead_letter_kind] += 1
            dead_letter(out, message, outcome.dead_letter, topics, partition_for,
                        max_message_bytes, now)  # fmt: skip
        elif outcome.rekey is not None:
            out.rekeys.append(Rekey(outcome.rekey, value, source, headers_of(message)))
        else:
            event_time = event.envelope.event_time
            if event_time > newest:
                newest = event_time
            for decision in outcome.decisions:
                key, encoded = decision.run_id.encode(), encode_decision(decision)
                out.add(
                    OutRecord(
                        control, key, encoded, partition_for(control, key), source,
                        headers=context.sign(decision.gateway_id, encoded),
                    )
                )  # fmt: skip
            out.decisions.extend(outcome.decisions)
            out.loop_tokens += outcome.loop_tokens
            out.saved_tokens += outcome.saved_tokens
            if topics.agent_sends and is_send_call(event):  # loops between agents (issue 28)
                key = cycle_key(event).encode()
                partition = partition_for(topics.agent_sends, key)
                out.add(OutRecord(topics.agent_sends, key, value, partition, source))
    if newest >= 0:
        out.newest_event_time_ms = newest
    # Signed, a batch's watermarks go out per gateway too: each record under its gateway's key.
    signing = context.keys is not None
    marks: dict[tuple[int, TopicPartition, str], list[RunWatermark]] = {}
    for run in processor.take_touched():
        # The state goes to its events' partition (streams.worker.tables): an applied event
        # came from there (else it was re-keyed), and so goes the watermark, after the run's
        # decisions on the same partition: a gateway that sees it holds every verdict up to
        # its seq (in-time enforcement, run progress).
        partition = partition_for(topics.changelog, state_routing_key(run.key, run.state))
        source = (topics.events, partition)
        out.state_writes.append(StateWrite(run.key, run.state, partition))
        stored = context.states.encode(run.state)
        out.add(OutRecord(topics.changelog, run.key, stored, partition, source))
        destination = partition_for(control, run.key)
        if per_run_watermarks:
            value = encode_watermark(run.watermark)
            headers = context.sign(run.watermark.gateway_id, value)
            out.add(OutRecord(control, run.key, value, destination, source, headers=headers))
        else:
            gateway = run.watermark.gateway_id if signing else ""
            marks.setdefault((destination, source, gateway), []).append(run.watermark)
    for (destination, source, gateway), batch_marks in marks.items():
        for value in encode_watermark_chunks(batch_marks, max_size=max_message_bytes):
            headers = context.sign(gateway, value)
            out.add(OutRecord(control, None, value, destination, source, headers=headers))
    out.sessions = processor.take_sessions()
    return out


def headers_of(message: Message) -> tuple[tuple[str, bytes], ...]:
    """A consumed message's headers as pairs (a fake message in tests may have none)."""
    headers = getattr(message, "headers", None) or ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return tuple((str(name), bytes(raw)) for name, raw in pairs if isinstance(raw, bytes))


def unsigned(context: BatchContext, gateway_id: str, message: Message, value: bytes) -> str:
    """With keys set, why an event is not its gateway's ("kind: reason"); "" when it is."""
    if context.keys is None:
        return ""
    kind = context.keys.check(gateway_id, getattr(message, "headers", None), value)
    if not kind:
        return ""
    return f"{kind}: event of gateway {gateway_id!r} refused ({REFUSALS[kind]})"


REFUSALS = {
    UNSIGNED: "no loopguard-sig header; this worker requires signed events",
    BAD_SIGNATURE: "its signature does not verify under that gateway's keys",
    UNKNOWN_GATEWAY: "no key is configured for that gateway",
}


def take_command(
    out: BatchOutput,
    message: Message,
    source: TopicPartition,
    processor: EventProcessor,
    context: BatchContext,
    topics: BatchTopics,
    now: float,
) -> None:
    """Apply an operator's command (streams.core.operator_release): its decision goes to the
    control topic like an event's, before the batch's watermarks; a bad command, or one for
    a run this worker does not hold, is dead-lettered with the reason."""
    value, partition_for = message.value or b"", context.partition_for
    max_bytes = context.max_message_bytes
    try:
        command = decode_command(value, max_size=max_bytes)
    except CodecError as exc:
        out.dead_letter_kinds[exc.kind] += 1
        dead_letter(out, message, str(exc), topics, partition_for, max_bytes, now)
        return
    except Exception as exc:  # noqa: BLE001 - issue 40: no record ends the worker
        out.dead_letter_kinds["undecodable"] += 1
        why = f"undecodable command: {failure_text(exc)}"
        dead_letter(out, message, why, topics, partition_for, max_bytes, now)
        return
    if context.keys is not None:  # issue 40: an operator, or the run's own gateway
        run_id = command.envelope.run_id
        # a gateway may release or abort a run of its own (a held call's holdDefault), one
        # run at a time: never by --agent scope, never another gateway's run
        owner = processor.owner_of(run_id) if command.scope == RUN_SCOPE else ""
        refused = context.keys.check_command(getattr(message, "headers", None), value, owner)
        if refused:
            out.dead_letter_kinds[refused] += 1
            why = f"{refused}: {command.command} of run {run_id} refused (it needs an operator "
            why += "key's signature, loopguard release with the keys file, or for this run "
            why += "alone its own gateway's)"
            dead_letter(out, message, why, topics, partition_for, max_bytes, now)
            return
    out.event_kinds[COMMAND_KIND] += 1
    outcome = processor.apply_command(message.key, command)
    if outcome.dead_letter is not None:
        out.dead_letter_kinds["invalid_event"] += 1
        dead_letter(out, message, outcome.dead_letter, topics, partition_for, max_bytes, now)
        return
    if outcome.rekey is not None:
        out.rekeys.append(Rekey(outcome.rekey, value, source, headers_of(message)))
        return
    for decision in outcome.decisions:
        key = decision.run_id.encode()
        encoded = encode_decision(decision)
        headers = context.sign(decision.gateway_id, encoded)  # issue 40: for its gateway
        partition = partition_for(topics.control, key)
        out.add(OutRecord(topics.control, key, encoded, partition, source, headers=headers))
    out.decisions.extend(outcome.decisions)


def dead_letter(
    out: BatchOutput,
    message: Message,
    error: str,
    topics: BatchTopics,
    partition_for: Partitioner,
    max_message_bytes: int,
    now: float,
) -> None:
    """Park undecodable input with its original bytes; never stop the worker for it.

    A payload larger than the message limit keeps only its first 64 KiB (the record names
    the source topic, partition and offset, where the whole message still is): copying it
    whole could exceed the broker's request size and take the worker down with it.
    """
    out.dead_letters.append(
        send_dead_letter(
            out, message, error, topics.deadletter, partition_for, max_message_bytes, now
        )
    )
