"""Exactly once with "immediate" control delivery: each batch's state and offsets follow its
decisions, in batch order, off the guarding agent's path.

Once a batch's decisions and watermarks are with the producer (sent outside the
transaction, :class:`streams.worker.exactly_once.Checkpoint`), nothing a gateway waits for
is left to the agent: their acknowledgements, the batch's transactional records (its runs'
changelog writes and dead letters), its acks and the commit that carries them
are *settled* here, one batch after the other, while the agent already decides the next
batch. A transaction's commit takes 30 ms and more on a busy cluster; while the agent waited
for it, every event that arrived meanwhile waited too (p50 45 ms, p99 110 ms at 200
events/s, docs/benchmarks.md).

What stays true: a batch's records are sent before its events are acked, so committed
offsets never run ahead of committed state; its decisions were acknowledged before its
records were sent, so committed state never runs ahead of its decisions (events replayed
over it publish nothing, as :class:`streams.service.processor.EventProcessor` does exactly
once). A rebalance waits for every taken event to be acked (Faust's ``wait_empty``), so a
partition leaves only once its batches are settled and committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from streams.service.batch import OutRecord, TopicPartition

log = logging.getLogger("loopguard.worker")

# Batches waiting to be settled before the agent waits for them (a slow commit under a burst).
MAX_UNSETTLED = 64


class Settling:
    """The chain of batches still to settle: each awaits the one before it, sends its
    transactional records, acks its events and, when no later batch is queued, commits."""

    def __init__(
        self,
        send: Callable[[Mapping[TopicPartition, Sequence[OutRecord]]], Awaitable[None]],
        commit: Callable[[], Awaitable[Any]],
        on_failure: Callable[[BaseException], None],
        limit: int = MAX_UNSETTLED,
    ) -> None:
        self.send, self.commit, self.on_failure = send, commit, on_failure
        self.limit = limit
        self.tail: asyncio.Task | None = None
        self.unsettled = 0
        self.failed: BaseException | None = None

    async def add(
        self,
        delivered: Sequence[asyncio.Future],
        records: Mapping[TopicPartition, Sequence[OutRecord]],
        ack: Callable[[], Awaitable[None]],
        then: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        """Queue a batch behind the ones before it: ``delivered``, its decisions' and
        watermarks' deliveries, then its transactional ``records``, then ``ack``, then
        ``then`` (writes that no event's offsets carry commit their transactions there).
        Waits only when ``limit`` batches are queued."""
        if self.failed is not None:
            raise self.failed
        while self.unsettled >= self.limit and self.tail is not None:
            await asyncio.wait({self.tail})
        self.unsettled += 1
        self.tail = asyncio.ensure_future(self.settle(self.tail, delivered, records, ack, then))

    async def settled(self) -> None:
        """Return once every batch queued so far is settled (tests, shutdown)."""
        while self.tail is not None and not self.tail.done():
            await asyncio.wait({self.tail})

    async def settle(
        self,
        previous: asyncio.Task | None,
        delivered: Sequence[asyncio.Future],
        records: Mapping[TopicPartition, Sequence[OutRecord]],
        ack: Callable[[], Awaitable[None]],
        then: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        try:
            if previous is not None:
                await asyncio.wait({previous})
            if self.failed is not None:  # an earlier batch failed: its successors never ack
                return
            if delivered:  # acknowledged (acks=all) before any state that follows from them
                await asyncio.gather(*delivered)
            await self.send(records)
            await ack()
            if then is not None:
                await then()
            if self.tail is asyncio.current_task():  # the last queued: commit them all
                await self.commit()
        except Exception as exc:  # the worker stops; its successor resumes from the commit
            if self.failed is None:
                self.failed = exc
                log.error("could not settle a batch (its state and offsets): %r", exc)
                self.on_failure(exc)
        finally:
            self.unsettled -= 1
