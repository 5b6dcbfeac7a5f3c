"""Dead letters on the wire: a message a worker gave up on, kept byte for byte with the
reason, as the ``DeadLetter`` Avro record (single-object encoding, single_object.py)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as dataclass_fields

from streams.wire.errors import EncodeError
from streams.wire.schema_registry import SchemaRegistry
from streams.wire.single_object import DEAD_LETTER_MAX_SIZE, own_codecs


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterRecord:
    """A message a worker gave up on, kept byte for byte with the reason, for replay.

    The wire form of the ``DeadLetter`` Avro record (the ORM row is
    :class:`streams.audit.models.DeadLetter`).
    """

    source_topic: str
    partition: int
    offset: int
    error: str
    payload: bytes
    event_time: int  # when it was dead-lettered, epoch milliseconds
    key: bytes | None = None


_DEAD_LETTER_FIELDS = tuple(f.name for f in dataclass_fields(DeadLetterRecord))


def encode_dead_letter(letter: DeadLetterRecord, *, max_size: int = DEAD_LETTER_MAX_SIZE) -> bytes:
    """Single-object Avro bytes for a dead letter."""
    if not isinstance(letter, DeadLetterRecord):
        raise EncodeError(f"not a DeadLetterRecord: {type(letter).__name__}")
    datum = {name: getattr(letter, name) for name in _DEAD_LETTER_FIELDS}
    for name in ("payload", "key"):
        if isinstance(datum[name], bytearray | memoryview):
            datum[name] = bytes(datum[name])
    return own_codecs()["DeadLetter"].encode(datum, max_size)


def decode_dead_letter(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEAD_LETTER_MAX_SIZE,
) -> DeadLetterRecord:
    """Decode a dead letter (larger default limit: it wraps a possibly oversized payload)."""
    datum = own_codecs()["DeadLetter"].decode(data, registry, max_size)
    return DeadLetterRecord(**{name: datum[name] for name in _DEAD_LETTER_FIELDS})
