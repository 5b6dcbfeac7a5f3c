"""A consumed message a pipeline gave up on, as the dead letter that keeps it (its bytes, its
position and why): one builder for every per-batch function of the service."""

from __future__ import annotations

import logging

from streams.service.records import Message, OutRecord, Partitioner, Produced
from streams.wire.avro import DeadLetterRecord, encode_dead_letter
from streams.wire.errors import CodecError, one_line

log = logging.getLogger("loopguard.worker")

# A payload over the message limit keeps only its first 64 KiB (the record names the source
# topic, partition and offset, where the whole message still is).
DEAD_LETTER_PAYLOAD_LIMIT = 65_536


def failure_text(exc: BaseException) -> str:
    """Why a record failed, in one line: the codec's own words for bad input, else the
    exception's type and first line (a RecursionError's message alone says little)."""
    return str(exc) if isinstance(exc, CodecError) else one_line(exc)


def dead_letter_record(
    message: Message, error: str, max_message_bytes: int, now: float
) -> DeadLetterRecord:
    """``message`` kept with ``error`` (logged once here); ``now``: wall-clock seconds."""
    payload = message.value or b""
    if len(payload) > max_message_bytes:
        error = (
            f"{error} (payload truncated to its first {DEAD_LETTER_PAYLOAD_LIMIT} of "
            f"{len(payload)} bytes; the whole message is at the source offset)"
        )
        payload = payload[:DEAD_LETTER_PAYLOAD_LIMIT]
    log.warning(
        "dead-lettered %s[%s]@%s: %s", message.topic, message.partition, message.offset, error
    )
    return DeadLetterRecord(
        source_topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        error=error,
        key=message.key,
        payload=payload,
        event_time=int(now * 1000),
    )


def send_dead_letter(
    out: Produced,
    message: Message,
    error: str,
    topic: str,
    partition_for: Partitioner,
    max_message_bytes: int,
    now: float,
) -> DeadLetterRecord:
    """Dead-letter ``message`` on ``topic`` with the batch's records (committed with the
    message's own partition); the record kept."""
    record = dead_letter_record(message, error, max_message_bytes, now)
    key = message.key
    value = encode_dead_letter(record)
    source = (message.topic, message.partition)
    out.add(OutRecord(topic, key, value, partition_for(topic, key), source))
    return record
