"""A batch's outgoing records, handed to the producer one chain per partition, all at once.

aiokafka keeps one open batch per partition, and a send to a partition whose batch is full
waits until the sender has drained it; the sender has one produce request in flight per
broker, carrying at most one batch per partition. On tansu a batch holds one record (README,
"tansu notes"), so every send after a partition's first waits for a produce round trip.
:meth:`BatchSends.flush` therefore sends each (topic, partition)'s records in order in its
own task, all partitions concurrently: a run's decisions stay before its watermark and its
older state before its newer (same key, same partition), and a produce request carries a
record for every partition that has one waiting.

The records are raw bytes handed to Faust's producer (``ProducerT.send``), not sent through
``Topic.send``: every ``Topic.send`` yields to the event loop once (Faust's producer start
check, a stampede guard, sleeps), so a batch of 400 records ran 400 loop turns of other
work between them, and made a future, a pending message and sensor calls per record; the
worker spent 57% of its guarding time there (README, "Throughput"). ``flush`` returns once
every record is with the producer (not yet acknowledged), as ``Topic.send`` did: at least
once, Faust flushes the producer before it commits offsets; exactly once, each record is in
its source partition's transaction, committed with that partition's offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("loopguard.worker")

# (topic, key) -> the partition the producer's partitioner picks (Faust's key_partition).
Partitioner = Callable[[str, bytes], Any]
# The source partition (TP) -> the transactional id its records go in; None at least once.
TransactionOf = Callable[[Any], str | None]
# (key, value, transactional id or None)
Record = tuple[bytes, bytes, str | None]


class BatchSends:
    """Records to send, kept in order per (topic, partition)."""

    def __init__(
        self,
        producer: Any,
        key_partition: Partitioner,
        transaction_of: TransactionOf,
        on_delivery_error: Callable[[BaseException], None],
    ) -> None:
        self.producer = producer  # Faust's transport producer (faust.types.ProducerT)
        self.key_partition = key_partition
        self.transaction_of = transaction_of
        self.on_delivery_error = on_delivery_error
        self.chains: dict[tuple[str, int], list[Record]] = {}

    def add(
        self,
        topic: str,
        key: bytes,
        value: bytes,
        partition: int | None = None,
        *,
        source: Any = None,
    ) -> None:
        """Queue ``value`` for ``topic`` under ``key``; without a ``partition``, the one the
        producer would hash ``key`` to. ``source``: the events partition (TP) whose
        transaction takes the record, exactly once."""
        if partition is None:
            partition = self.key_partition(topic, key).partition
        tid = None if source is None else self.transaction_of(source)
        self.chains.setdefault((topic, partition), []).append((key, value, tid))

    def __len__(self) -> int:
        return sum(len(records) for records in self.chains.values())

    async def flush(self) -> None:
        """Hand every queued record to the producer; the chains run concurrently."""
        chains, self.chains = self.chains, {}
        await asyncio.gather(
            *(self.send_chain(topic, p, records) for (topic, p), records in chains.items())
        )

    async def send_chain(self, topic: str, partition: int, records: list[Record]) -> None:
        send = self.producer.send
        for key, value, tid in records:
            delivery = await send(topic, key, value, partition, None, None, transactional_id=tid)
            delivery.add_done_callback(self.check_delivery)

    def check_delivery(self, delivery: asyncio.Future) -> None:
        """A record the producer gave up on (its retries and timeout spent) must not pass
        unseen: at least once, Faust's commit flushes the producer but ignores failures."""
        if delivery.cancelled():
            return
        exc = delivery.exception()
        if exc is not None:
            log.error("a record was not delivered: %r", exc)
            self.on_delivery_error(exc)
