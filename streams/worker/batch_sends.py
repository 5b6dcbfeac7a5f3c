"""A batch's outgoing records, handed to the producer one chain per partition, all at once.

aiokafka keeps one open batch per partition, and a send to a partition whose batch is full
waits until the sender has drained it; the sender has one produce request in flight per
broker, carrying at most one batch per partition. On tansu a batch holds one record (README,
"tansu notes"), so every send after a partition's first waits for a produce round trip. Sent
one after another, as the worker did, a batch of 500 events waited for about 1,000 round trips
(500 watermarks from the agent, 500 changelog writes from Faust's producer buffer, which
sends one message at a time too), and each request carried one or two records.

A :class:`BatchSends` collects the records instead and :meth:`BatchSends.flush` sends each
(topic, partition)'s records in order in its own task, all partitions concurrently: a run's
decisions stay before its watermark and its older state before its newer (same key, same
partition), and a produce request carries a record for every partition that has one waiting.
``flush`` returns once every record is with the producer (not yet acknowledged), as the
awaited sends did before, so a batch's events are still acked only after their records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from streams.worker.exactly_once import in_transaction_of

# (topic, key) -> the partition the producer's partitioner picks (Faust's key_partition).
Partitioner = Callable[[str, bytes], Any]
# (Faust topic, key, value, source partition for the exactly-once transaction or None)
Record = tuple[Any, bytes, Any, Any]


class BatchSends:
    """Records to send, kept in order per (topic, partition)."""

    def __init__(self, key_partition: Partitioner) -> None:
        self.key_partition = key_partition
        self.chains: dict[tuple[str, int], list[Record]] = {}

    def add(
        self,
        topic: Any,
        key: bytes,
        value: Any,
        partition: int | None = None,
        *,
        source: Any = None,
    ) -> None:
        """Queue ``value`` for the Faust topic ``topic`` under ``key`` (raw bytes); without
        a ``partition``, the one the producer would hash ``key`` to. ``source``: the events
        partition (TP) whose transaction takes the record, exactly once."""
        name = topic.get_topic_name()
        if partition is None:
            partition = self.key_partition(name, key).partition
        self.chains.setdefault((name, partition), []).append((topic, key, value, source))

    def __len__(self) -> int:
        return sum(len(records) for records in self.chains.values())

    async def flush(self) -> None:
        """Hand every queued record to the producer; the chains run concurrently."""
        chains, self.chains = self.chains, {}
        await asyncio.gather(*(send_chain(p, records) for (_, p), records in chains.items()))


async def send_chain(partition: int, records: list[Record]) -> None:
    for topic, key, value, source in records:
        if source is None:
            await topic.send(key=key, value=value, partition=partition)
            continue
        with in_transaction_of(source):  # this task's own context: no other chain sees it
            await topic.send(key=key, value=value, partition=partition)
