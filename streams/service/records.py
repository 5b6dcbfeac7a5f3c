"""What every per-batch function of the service takes and gives: messages in; records to
produce, grouped by destination partition, out; and what it needs from the worker, as data
plus one small protocol (the producer's partitioner).

One record type serves every pipeline (guarding, loops between agents, incidents), so the
adapter sends them all the same way (:mod:`streams.worker.checkpoint`, the incidents'
plain producer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from streams.core.events import AgentEvent
from streams.state.state_encoder import StateEncoder
from streams.wire.avro import decode_event
from streams.wire.schema_registry import SchemaRegistry
from streams.wire.signing import GatewayKeys

# (topic, partition): a message's partition (a record's source) or a record's destination.
TopicPartition = tuple[str, int]


class Message(Protocol):
    """A consumed message as the consumer hands it over (Faust's ``Message`` fits)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class OutRecord:
    """A record to produce: ``source`` is the consumed partition it is committed with (exactly
    once, that partition's transaction); a ``value`` of None is a tombstone (a state deleted
    from its compacted changelog); ``timestamp`` in epoch ms, None for the producer's clock."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int
    source: TopicPartition
    timestamp: int | None = None
    # Record headers: a control record's signature (streams.wire.signing) when keys are set.
    headers: tuple[tuple[str, bytes], ...] = ()


Records = Mapping[TopicPartition, Sequence[OutRecord]]


@dataclass
class Produced:
    """Records per destination partition, each in the order it must reach it, and the next
    offset to commit per consumed partition."""

    records: dict[TopicPartition, list[OutRecord]] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)

    def add(self, record: OutRecord) -> None:
        self.records.setdefault((record.topic, record.partition), []).append(record)

    def consumed(self, message: Message) -> TopicPartition:
        """Note ``message`` as consumed (its offset is committed with the batch); its source."""
        source = (message.topic, message.partition)
        offset = message.offset + 1
        if self.offsets.get(source, -1) < offset:
            self.offsets[source] = offset
        return source

    def record_count(self) -> int:
        return sum(len(records) for records in self.records.values())

    def all_records(self) -> list[OutRecord]:
        return [record for records in self.records.values() for record in records]


class Partitioner(Protocol):
    """The producer's partitioner (murmur2, as the gateways' and Java's): the partition of
    ``topic`` a record keyed ``key`` goes to."""

    def __call__(self, topic: str, key: bytes | None, /) -> int: ...


@dataclass(frozen=True)
class BatchContext:
    """What a per-batch function needs from the worker: the registry events decode with
    (unknown writer schemas are looked up before the batch), the message limit, and the
    producer's partitioner; with ``keys`` (issue 40) an event must be signed by its gateway
    and a control record is signed for the gateway it is about."""

    registry: SchemaRegistry
    partition_for: Partitioner
    max_message_bytes: int
    keys: GatewayKeys | None = None
    # run states as changelog bytes, each looping run's recent decisions packed once
    states: StateEncoder = field(default_factory=StateEncoder)

    def sign(self, gateway_id: str, value: bytes) -> tuple[tuple[str, bytes], ...]:
        """A control record's headers: signed for ``gateway_id`` when keys are set."""
        return () if self.keys is None else self.keys.headers_for(gateway_id, value)

    def decode(self, value: bytes) -> AgentEvent:
        """An event; :class:`~streams.wire.errors.CodecError` for bad input (an unknown
        writer schema included)."""
        return decode_event(value, self.registry, max_size=self.max_message_bytes)
