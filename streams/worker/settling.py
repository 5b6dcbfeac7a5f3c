"""Exactly once with "immediate" control delivery: each batch's state and offsets follow its
decisions, in batch order, off the guarding agent's path.

Once a batch's decisions and watermarks are with the producer (sent outside the
transaction, :class:`streams.worker.checkpoint.Checkpoint`), nothing a gateway waits for
is left to the agent: their acknowledgements, the batch's transactional records (its runs'
changelog writes and dead letters), its acks and the commit that carries them are *settled*
here, in rounds that take every batch queued so far, while the agent already decides the
next batch. A transaction's commit takes 30 ms and more on a busy cluster; while the agent
waited for it, every event that arrived meanwhile waited too (p50 45 ms, p99 110 ms at 200
events/s, docs/benchmarks.md).

What stays true: a batch's records are sent before its events are acked, so committed
offsets never run ahead of committed state; its decisions were acknowledged before its
records were sent, so committed state never runs ahead of its decisions (events replayed
over it publish nothing, as :class:`streams.service.processor.EventProcessor` does exactly
once). A rebalance waits for every taken event to be acked (Faust's ``wait_empty``), and the
worker rejoins the group only once the rounds holding those acks have committed
(:meth:`streams.worker.checkpoint.Checkpoint.settle_before_rejoining`), so a partition leaves
only once its batches are settled and committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from time import monotonic
from typing import Any

from streams.service.records import OutRecord, Records, TopicPartition

log = logging.getLogger("loopguard.worker")

# Batches waiting to be settled before the agent waits for room (a slow commit under a burst).
MAX_UNSETTLED = 64


@dataclass(frozen=True, slots=True)
class Unsettled:
    """A batch decided and published, its state, acks and commit still to come."""

    delivered: Sequence[asyncio.Future]  # its decisions' and watermarks' deliveries
    records: Records  # its transactional records, per destination partition, in order
    ack: Callable[[], Awaitable[None]]
    then: Callable[[], Awaitable[Any]] | None = None  # e.g. commit writes no offsets carry


class Settling:
    """The batches still to settle, settled in rounds: a round takes every batch queued so
    far, waits for their deliveries, sends their records (in batch order), acks their
    events and commits once, so under load a round grows instead of the queue: one batch at
    a time, each behind the commit before it, fell behind after a burst, filled the queue
    and held the agent for a second (docs/benchmarks.md)."""

    def __init__(
        self,
        send: Callable[[Records], Awaitable[None]],
        commit: Callable[[], Awaitable[Any]],
        on_failure: Callable[[BaseException], None],
        limit: int = MAX_UNSETTLED,
        on_round: Callable[[float], None] | None = None,
    ) -> None:
        self.send, self.commit, self.on_failure = send, commit, on_failure
        self.limit = limit
        self.on_round = on_round  # a committed round's seconds (the worker's metric)
        self.queued: list[Unsettled] = []
        self.room = asyncio.Event()
        self.room.set()
        self.rounds: asyncio.Task | None = None
        self.failed: BaseException | None = None

    async def add(
        self,
        delivered: Sequence[asyncio.Future],
        records: Records,
        ack: Callable[[], Awaitable[None]],
        then: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        """Queue a batch behind the ones before it: ``delivered``, its decisions' and
        watermarks' deliveries, then its transactional ``records``, then ``ack``, then
        ``then`` (writes that no event's offsets carry commit their transactions there).
        Waits only while ``limit`` batches are queued and no round has taken them."""
        while not self.room.is_set() and self.failed is None:
            await self.room.wait()
        if self.failed is not None:
            raise self.failed
        self.queued.append(Unsettled(delivered, records, ack, then))
        if len(self.queued) >= self.limit:
            self.room.clear()
        if self.rounds is None or self.rounds.done():
            self.rounds = asyncio.ensure_future(self.settle_rounds())

    async def settled(self) -> None:
        """Return once every batch queued so far is settled (tests, shutdown)."""
        while self.rounds is not None and not self.rounds.done():
            await asyncio.wait({self.rounds})

    async def settle_rounds(self) -> None:
        while self.queued and self.failed is None:
            batches, self.queued = self.queued, []
            self.room.set()
            started = monotonic()
            try:
                await self.settle(batches)
            except Exception as exc:  # the worker stops; its successor resumes from the commit
                self.failed = exc
                self.room.set()  # the agent's next add raises it
                log.error("could not settle a batch (its state and offsets): %r", exc)
                self.on_failure(exc)
            else:
                if self.on_round is not None:
                    self.on_round(monotonic() - started)

    async def settle(self, batches: list[Unsettled]) -> None:
        """One round: deliveries, records, acks, then the commit that carries them."""
        delivered = [delivery for batch in batches for delivery in batch.delivered]
        if delivered:  # acknowledged (acks=all) before any state that follows from them
            await asyncio.gather(*delivered)
        records: dict[TopicPartition, list[OutRecord]] = {}
        for batch in batches:  # a partition's records in batch order: a run's newest state last
            for tp, chain in batch.records.items():
                records.setdefault(tp, []).extend(chain)
        await self.send(records)
        for batch in batches:
            await batch.ack()
        for batch in batches:
            if batch.then is not None:
                await batch.then()
        await self.commit()
