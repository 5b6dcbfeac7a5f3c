"""Commits that keep a run's state, its decisions and the events' offsets in one transaction.

With ``processing_guarantee="exactly_once"`` Faust 0.15.3 commits a partition's offsets and
its producer transaction (``Consumer._commit_offsets``) on a timer, independently of the
agents, and three things break the agreement between committed offsets, committed changelog
state and committed decisions that read-committed table recovery relies on (read from the
source, with the worker logs of tests/integration/test_kafka_failover.py and
test_reliability.py on the 3-node cluster):

* Table writes go through Faust's producer buffer (``Table.__setitem__`` -> ``send_soon``),
  which the transactional commit never flushes (Faust's ``ProducerBuffer.flush`` also gives
  up after 0.1 s without a sent message): a run's changelog write can land in the
  transaction *after* the one committing its events' offsets. While a broker is down a
  commit holds the transactional producers' locks for seconds ("Timer commit is
  overlapping, runtime=4.8s"), the buffer waits behind them and the gap grows. If that later
  transaction is lost (a SIGKILL, a partition moving away) or recovery replays only the
  committed changelog (any rebalance, below), the run's state misses events the consumer
  will not read again: decisions at later seqs, or missing.
* The timer commits in the middle of an agent's batch: decisions of events whose offsets
  were not committed go out in a committed transaction, and after a crash those events are
  decided again (the same decision twice, read committed).
* On a rebalance Faust forgets which messages were acked (``Consumer.on_partitions_revoked``
  drops them) *before* its revocation handler commits, so that commit commits nothing and the
  transactions stay open across the rebalance (aiokafka logs "Invalid state transition
  IN_TRANSACTION -> IN_TRANSACTION" for each kept partition). Recovery then replays the
  committed changelog over the in-memory table and the consumer seeks back to the committed
  offsets: events are decided again into the still-open transaction (doubles), or, with the
  buffer gap above, never applied again (lost).

:func:`exactly_once_commits` commits before Faust forgets the acks on a rebalance, and makes
every exactly-once commit wait until the guarding agent is between batches (a lock the agent
holds while it works on a batch), hand every buffered message to its transactional producer,
and only then commit. A batch's events are acked when the agent asks for the next one, so a
commit may still include a batch's state and decisions but not its offsets; the replayed
events are then duplicates of the stored state, and the processor publishes nothing for them
on this guarantee (:class:`streams.worker.processor.EventProcessor`'s
``republish_duplicates``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from faust.transport import consumer as faust_consumer
from faust.transport import producer as faust_producer

_original_commit_offsets = faust_consumer.Consumer._commit_offsets
_original_send_pending = faust_producer.ProducerBuffer._send_pending
_original_on_partitions_revoked = faust_consumer.Consumer.on_partitions_revoked

# The guarding agent's batch lock (WorkerParts.commit_barrier), set by exactly_once_commits.
_barrier: asyncio.Lock | None = None

# Upstream sources these patches were read against (see faust_patches.patch_mismatches).
REPLACED = {
    "Consumer._commit_offsets": (_original_commit_offsets, "1a69799041188441"),
    "ProducerBuffer._send_pending": (_original_send_pending, "4a9d5f932b56bc68"),
    "Consumer.on_partitions_revoked": (_original_on_partitions_revoked, "d04b7ae72c6fc206"),
}


class _InFlight:
    """How many messages a producer buffer has taken off its queue and not yet handed on."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = asyncio.Event()
        self.idle.set()


def _in_flight(buffer: Any) -> _InFlight:
    state = buffer.__dict__.get("loopguard_in_flight")
    if state is None:
        state = buffer.__dict__["loopguard_in_flight"] = _InFlight()
    return state


async def _counted_send_pending(self: Any, fut: Any) -> None:
    state = _in_flight(self)
    state.count += 1
    state.idle.clear()
    try:
        await _original_send_pending(self, fut)
    finally:
        state.count -= 1
        if not state.count:
            state.idle.set()


async def drain_producer_buffer(buffer: Any) -> None:
    """Return once every message put in ``buffer`` so far is with its Kafka producer.

    The buffer's own task keeps sending, one message at a time and in order (a run's newer
    state must stay after its older one on the compacted changelog); this only waits for it.
    """
    state = _in_flight(buffer)
    while state.count or not buffer.pending.empty():
        if state.count:
            await state.idle.wait()
        elif buffer.should_stop:  # its task is gone: hand the rest over here, in order
            await buffer._send_pending(buffer.pending.get_nowait())
        else:  # its task was woken by the put and takes the message on its next turn
            await asyncio.sleep(0)


async def _commit_offsets_between_batches(
    self: Any, offsets: Any, start_new_transaction: bool = True
) -> bool:
    if not self.in_transaction:
        return await _original_commit_offsets(self, offsets, start_new_transaction)
    assert _barrier is not None, "exactly_once_commits() installs the barrier"
    async with _barrier:
        await drain_producer_buffer(self.app.producer.buffer)
        return await _original_commit_offsets(self, offsets, start_new_transaction)


async def _commit_then_revoke(self: Any, revoked: Any) -> None:
    """Commit what was processed while Faust still knows it, then revoke as upstream does."""
    if self.in_transaction and not self.app.client_only:
        await self.maybe_wait_for_commit_to_finish()  # a timer commit may be under way
        await self.commit()
    await _original_on_partitions_revoked(self, revoked)


def exactly_once_commits(barrier: asyncio.Lock) -> None:
    """Install the patches; ``barrier`` is the lock the guarding agent holds per batch."""
    global _barrier
    _barrier = barrier
    faust_producer.ProducerBuffer._send_pending = _counted_send_pending
    faust_consumer.Consumer._commit_offsets = _commit_offsets_between_batches
    faust_consumer.Consumer.on_partitions_revoked = _commit_then_revoke
