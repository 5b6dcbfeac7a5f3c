"""The one step every agent takes per batch (the guarding agent's, the agent-cycles agent's):
the batch's work under the batch lock, its records to the producer in their source partitions'
transactions, its events acked and, exactly once, its offsets committed with them; with
immediate control delivery the control records go out first and the rest is settled later
(:mod:`streams.worker.settling`). The Faust patches this step relies on are in
:mod:`streams.worker.exactly_once`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

from faust.types import TP

from streams.service.records import OutRecord, Records, TopicPartition
from streams.worker.batch_sends import BatchSends
from streams.worker.exactly_once import (
    commit_batch,
    commit_outside_batches,
    drain_producer_buffer,
    source_transaction,
)
from streams.worker.settling import Settling

log = logging.getLogger("loopguard.worker")

# How long a rebalance waits for the batches still settling before the worker rejoins.
REJOIN_SETTLE_SECONDS = 10.0


class BatchWork(Protocol):
    """What a batch's work hands :meth:`Checkpoint.run`: its records per destination
    partition, in order, each naming its source partition (a
    :class:`~streams.service.batch.BatchOutput`, an agent-cycles batch)."""

    @property
    def records(self) -> Records: ...


Work = TypeVar("Work", bound=BatchWork)


class Checkpoint:
    """An agent's one step per batch (the guarding agent's, the agent-cycles agent's): the
    batch's work, its records handed to the producer in their source partitions'
    transactions, its events acked, then (exactly once) its offsets committed with those
    transactions.

    The work, the sends and the acks run under the batch lock, so a commit that Faust starts
    meanwhile (its timer, a rebalance) carries either all of a batch, records and offsets,
    or none of it; the commit runs after the lock is released (:func:`commit_batch` takes it).
    At least once, Faust's commit flushes the producer before it commits the acked offsets.

    Exactly once with immediate control delivery, only the work and the sends of the control
    records (and, acknowledged first, the forwarded agent-to-agent sends) run under the lock;
    the batch's state, acks and commit go to :class:`streams.worker.settling.Settling`.
    """

    def __init__(
        self,
        app: Any,
        barrier: asyncio.Lock,
        on_delivery_error: Callable[[BaseException], None],
        immediate_topics: frozenset[str] = frozenset(),
        ahead_topics: frozenset[str] = frozenset(),
        on_settled_round: Callable[[float], None] | None = None,
    ) -> None:
        self.app, self.barrier = app, barrier
        self.sends = BatchSends(app.producer, self.transaction_of, on_delivery_error)
        # Exactly once, topics whose records go outside the transaction, acknowledged before
        # the batch's offsets can commit (the control topic's "immediate" delivery).
        self.immediate_topics = immediate_topics if app.in_transaction else frozenset()
        # Of those, topics whose records are acknowledged before the others are sent: a
        # forwarded agent-to-agent send must be on its topic before its watermark lets the
        # gateway go on (the next agent's send must come after it, on any worker).
        self.ahead_topics = ahead_topics & self.immediate_topics
        self.settling = Settling(
            self.send_transactional,
            partial(commit_batch, app.consumer),
            on_delivery_error,
            on_round=on_settled_round,
        )
        app.on_partitions_revoked.connect(self.settle_before_rejoining)

    async def settle_before_rejoining(self, sender: Any, revoked: Any, **kwargs: Any) -> None:
        """Wait, at most :data:`REJOIN_SETTLE_SECONDS`, for the batches still settling, when a
        rebalance has taken this worker's partitions back (Faust's ``on_partitions_revoked``
        signal, sent before the worker rejoins the group; connected when the checkpoint is
        built, with its agent's first batch). Their commits ran on past the
        rejoin, and a partition's new owner starts its transactional producer as soon as it is
        assigned, which fences ours: the commit failed with ProducerFenced and Faust crashed
        the worker."""
        try:
            await asyncio.wait_for(self.settling.settled(), REJOIN_SETTLE_SECONDS)
        except TimeoutError:
            log.warning(
                "batches still settling after %.0f s: rejoining the group without them",
                REJOIN_SETTLE_SECONDS,
            )

    def transaction_of(self, source: tuple[str, int]) -> str | None:
        return source_transaction(self.app, TP(*source))

    async def run(
        self, work: Callable[[], Awaitable[Work]], ack: Callable[[], Awaitable[None]]
    ) -> Work:
        if self.immediate_topics:
            async with self.barrier:
                output = await work()
                immediate, transactional = self.split(output.records)
                ahead = {tp: chain for tp, chain in immediate.items() if tp[0] in self.ahead_topics}
                if ahead:
                    await asyncio.gather(*await self.sends.send_outside(ahead))
                    immediate = {tp: c for tp, c in immediate.items() if tp not in ahead}
                delivered = await self.sends.send_outside(immediate)  # what gateways wait for
            # Their acknowledgements, then state, acks and commit: in batch order, later.
            await self.settling.add(delivered, transactional, ack)
            return output
        async with self.barrier:
            output = await work()
            await self.send_transactional(output.records)
            await ack()  # now, so the commit below carries the batch's offsets
        if self.app.in_transaction:
            await commit_batch(self.app.consumer)
        return output

    async def write_outside_batches(self, records: Records) -> None:
        """Writes no event's offsets carry (run expiry's tombstones), each in its source
        partition's transaction, committed on their own: behind the batches still settling
        (immediate control delivery), else at once. The caller holds the batch lock."""
        written = {TP(*tp) for tp in records}
        if self.immediate_topics:
            committed = partial(commit_outside_batches, self.app, written)
            await self.settling.add([], records, _nothing_to_ack, committed)
            return
        await self.send_transactional(records)
        await commit_outside_batches(self.app, written)

    def split(self, records: Records) -> tuple[Records, Records]:
        """The batch's records sent outside the transaction, and those in it."""
        immediate: dict[TopicPartition, Sequence[OutRecord]] = {}
        transactional: dict[TopicPartition, Sequence[OutRecord]] = {}
        for tp, chain in records.items():
            (immediate if tp[0] in self.immediate_topics else transactional)[tp] = chain
        return immediate, transactional

    async def send_transactional(self, records: Records) -> None:
        # Table writes through Faust's producer buffer (the sessions table, expiry's
        # deletes) go first, in order, so a run's delete never overtakes its state.
        await drain_producer_buffer(self.app.producer.buffer)
        await self.sends.send(records)


async def _nothing_to_ack() -> None:
    return None
