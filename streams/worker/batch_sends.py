"""A batch's outgoing records, handed to the producer one chain per partition, all at once.

aiokafka keeps one open batch per partition, and a send to a partition whose batch is full
waits until the sender has drained it; the sender has one produce request in flight per
broker, carrying at most one batch per partition. On tansu a batch holds one record (README,
"tansu notes"), so every send after a partition's first waits for a produce round trip.
:meth:`BatchSends.send` therefore sends each (topic, partition)'s records in order in its
own task, all partitions concurrently: a run's decisions stay before its watermark and its
older state before its newer (same key, same partition), and a produce request carries a
record for every partition that has one waiting.

The records are raw bytes appended to aiokafka record batches (``create_batch`` /
``send_batch`` of the aiokafka producer Faust holds for the record's transaction, or its
plain one at least once), not sent through ``Topic.send`` or one ``send`` per record: every
``Topic.send`` yields to the event loop once and made a future, a pending message and sensor
calls per record (the worker spent 57% of its guarding time there, README "Throughput"), and
a plain ``send`` still costs a metadata wait, a partitioner call and a future per record. A
batch holds what the producer's batch size allows (on the tansu profile one record, so each
partition's chain still waits a round trip per record). ``send`` returns once every record is
with the producer (not yet acknowledged): at least once, Faust flushes the producer before it
commits offsets; exactly once, each record is in its source partition's transaction (Faust's
lock for that transaction held, as its own ``send`` does), committed with its offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from streams.service.records import OutRecord, TopicPartition

log = logging.getLogger("loopguard.worker")

# The source partition (topic, partition) -> the transactional id its records go in; None
# at least once.
TransactionOf = Callable[[TopicPartition], str | None]


class BatchSends:
    """Hands a batch's records (:attr:`streams.service.batch.BatchOutput.records`, grouped by
    destination partition, in order) to Faust's transport producer."""

    def __init__(
        self,
        producer: Any,
        transaction_of: TransactionOf,
        on_delivery_error: Callable[[BaseException], None],
    ) -> None:
        self.producer = producer  # Faust's transport producer (faust.types.ProducerT)
        self.transaction_of = transaction_of
        self.on_delivery_error = on_delivery_error

    async def send(self, records: Mapping[TopicPartition, Sequence[OutRecord]]) -> None:
        """Hand every record to the producer, each in its source partition's transaction;
        the partitions' chains run concurrently."""
        tids: dict[TopicPartition, str | None] = {}
        for chain in records.values():
            for record in chain:
                if record.source not in tids:
                    tids[record.source] = self.transaction_of(record.source)
        await asyncio.gather(*(self.send_chain(chain, tids) for chain in records.values()))

    async def send_outside(
        self, records: Mapping[TopicPartition, Sequence[OutRecord]]
    ) -> list[asyncio.Future]:
        """Hand every record to the producer outside any transaction (exactly once, the
        control topic's "immediate" delivery: :class:`streams.worker.checkpoint.Checkpoint`)
        and return their deliveries, for the caller to await before it acks the batch."""
        deliveries: list[asyncio.Future] = []
        await asyncio.gather(
            *(self.send_stretch(chain, None, deliveries) for chain in records.values())
        )
        return deliveries

    async def send_chain(
        self, records: Sequence[OutRecord], tids: Mapping[TopicPartition, str | None]
    ) -> None:
        """One destination partition's records, in order: each stretch that shares a
        transaction goes to that transaction's producer in whole record batches."""
        start = 0
        while start < len(records):
            tid = tids[records[start].source]
            end = start + 1
            while end < len(records) and tids[records[end].source] == tid:
                end += 1
            await self.send_stretch(records[start:end], tid)
            start = end

    async def send_stretch(
        self,
        records: Sequence[OutRecord],
        tid: str | None,
        deliveries: list[asyncio.Future] | None = None,
    ) -> None:
        """Records for one partition and one producer, appended to aiokafka record batches
        of the producer's batch size (a record each on the tansu profile) and handed over a
        batch at a time: no future, task or sensor call per record as ``send`` makes. Each
        batch's delivery goes to ``deliveries`` when given."""
        producer = self.producer  # Faust's; its aiokafka producers are what batches go to
        if tid is None:
            kafka, lock = producer._ensure_producer(), None
        else:
            kafka, lock = producer._transaction_producers[tid], producer._trn_locks[tid]
        topic, partition = records[0].topic, records[0].partition
        if lock is not None:
            await lock.acquire()  # as Faust's send: never into a transaction being committed
        try:
            builder = kafka.create_batch()
            for record in records:
                if self.append(builder, record) is None:
                    await self.submit(kafka, builder, topic, partition, deliveries)
                    builder = kafka.create_batch()  # an empty batch takes any one record
                    self.append(builder, record)
            await self.submit(kafka, builder, topic, partition, deliveries)
        finally:
            if lock is not None:
                lock.release()

    @staticmethod
    def append(builder: Any, record: OutRecord) -> Any:
        """Add ``record`` to ``builder`` (with its headers when it has any: a control record's
        signature, issue 40); None when the batch is full."""
        if record.headers:
            headers = list(record.headers)
            return builder.append(
                key=record.key, value=record.value, timestamp=None, headers=headers
            )
        return builder.append(key=record.key, value=record.value, timestamp=None)

    async def submit(
        self,
        kafka: Any,
        builder: Any,
        topic: str,
        partition: int,
        deliveries: list[asyncio.Future] | None = None,
    ) -> None:
        delivery = await kafka.send_batch(builder, topic, partition=partition)
        delivery.add_done_callback(self.check_delivery)
        if deliveries is not None:
            deliveries.append(delivery)

    def check_delivery(self, delivery: asyncio.Future) -> None:
        """A record the producer gave up on (its retries and timeout spent) must not pass
        unseen: at least once, Faust's commit flushes the producer but ignores failures."""
        if delivery.cancelled():
            return
        exc = delivery.exception()
        if exc is not None:
            log.error("a record was not delivered: %r", exc)
            self.on_delivery_error(exc)
