"""Commits that keep a run's state, its decisions and the events' offsets in one transaction.

With ``processing_guarantee="exactly_once"`` Faust 0.15.3 commits a partition's offsets and
its producer transaction (``Consumer.force_commit``) on a timer, independently of the
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
and only then read the acked offsets and commit. The agent acks a batch's events before it lets
go of the lock, so a commit carries a batch's offsets exactly when it carries the batch's
records. Writes committed ahead of their events' offsets remain possible only outside batches
(the expiry timer's, :func:`commit_outside_batches`); events replayed over them are duplicates
of the stored state, and the processor publishes nothing for them on this guarantee
(:class:`streams.service.processor.EventProcessor`'s ``republish_duplicates``).

With "immediate" control delivery (``LOOPGUARD_CONTROL_DELIVERY``, the default) a batch's
decisions and watermarks leave outside the transaction and the rest of the batch is settled
off the agent's path (:mod:`streams.worker.settling`, which says what stays true); commits
then take no barrier (:func:`exactly_once_commits`' ``between_batches``). What follows is
the "transactional" delivery's story, and the commit mechanics both share.

When a commit happens is latency: a read-committed gateway sees a decision and its run's
watermark only once their transaction commits. Faust commits on a timer
(``broker_commit_interval``, 0.5 s before), so a verdict waited for it a quarter second on
average. :class:`streams.worker.checkpoint.Checkpoint` is an agent's one step per batch (work,
sends, acks, commit) and :func:`commit_batch` its commit, made as soon as a batch's work is
done: the batch's events
are acked while the lock is still held (Faust's own ``take_events`` acks them only when the
agent asks for the next batch, too late for this commit), then the lock is released and the
commit made. A commit already under way (the timer's, a rebalance's)
either waited for the lock and took the batch too, or held the lock before the batch began; the
agent waits it out and commits once more, which commits nothing when nothing new was acked. The
next batch waits for the lock, so events that arrive during a commit are taken, and committed,
together. Faust's timer stays as the longest interval between commits
(``Settings.max_commit_interval``, 0.1 s, Kafka Streams' exactly-once default) for offsets no
batch commits (the audit agents'). Faust commits a partition's transactions one after the
other; :func:`_commit_transactions_concurrently` commits them together, so a commit costs one
transaction's round trips, not one per partition. Right after a commit the coordinator is still
writing the previous transaction's markers and answers the next transaction's first requests
with CONCURRENT_TRANSACTIONS; aiokafka retries most of them after ``retry_backoff_ms`` (100 ms
by default: a commit took 110-130 ms whenever it was hit), so the transactional producers retry
after ``Settings.transaction_retry_backoff_ms`` (5 ms) instead
(:func:`_quick_transaction_retries`).

An aborted transaction (a commit that failed, a crash, a fenced producer) takes its
decisions and watermarks with it: gateways read the control topic read committed, as does
the audit agent, so a gateway never enforces a decision the audit trail will not hold.

A fourth gap is where a record goes: Faust's ``TransactionManager.send`` picks the
transactional producer by the record's *destination* partition, and a partition's
transaction is committed only with that partition's own offsets. A session run's events are
keyed by the session id but its decisions and watermarks by the run id, so they went out in
another partition's transaction, committed late or never (``tests/integration/
test_sessions.py`` on Kafka: 0 decisions seen, read committed). Every record of a batch is
therefore sent by the :class:`~streams.worker.checkpoint.Checkpoint` itself, straight to
Faust's producer with the transactional id of its *source* partition
(:func:`source_transaction`; each record names it, :class:`streams.service.batch.OutRecord`),
wherever it lands. Table writes go through the
producer buffer's own task and keep Faust's choice, which is right because the runs and
sessions tables write to their events' partition (:mod:`streams.worker.tables`). Writes made
outside any batch (the expiry timer's deletions) have no offsets to ride with:
:func:`commit_outside_batches` commits their partitions' transactions itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from aiokafka.errors import KafkaError, ProducerFenced
from faust.transport import consumer as faust_consumer
from faust.transport import producer as faust_producer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from streams.worker.patching import Patch, replace

log = logging.getLogger("loopguard.worker")

_original_force_commit = faust_consumer.Consumer.force_commit
_original_send_pending = faust_producer.ProducerBuffer._send_pending
_original_on_partitions_revoked = faust_consumer.Consumer.on_partitions_revoked
_original_commit_transactions = faust_aiokafka.Producer.commit_transactions
_original_settings_extra = faust_aiokafka.Producer._settings_extra

# The guarding agent's batch lock (WorkerParts.commit_barrier), set by exactly_once_commits.
_barrier: asyncio.Lock | None = None

SETTINGS_EXTRA = Patch(
    faust_aiokafka.Producer,
    "_settings_extra",
    _original_settings_extra,
    "a4c7bc41b6382223",
    fixes="aiokafka's 100 ms retry backoff after CONCURRENT_TRANSACTIONS: a commit took "
    "110-130 ms whenever the coordinator was still writing the previous markers",
    proof="tests/unit/worker/test_exactly_once.py::test_exactly_once_producers_retry_quickly_and_the_others_as_before",
)
SEND_PENDING = Patch(
    faust_producer.ProducerBuffer,
    "_send_pending",
    _original_send_pending,
    "4a9d5f932b56bc68",
    fixes="table writes left in Faust's producer buffer, never flushed by the transactional "
    "commit: a run's changelog write landed after the commit of its events' offsets",
    proof="tests/unit/worker/test_exactly_once.py::test_the_drain_waits_for_queued_and_in_flight_messages_and_keeps_their_order",
)
FORCE_COMMIT = Patch(
    faust_consumer.Consumer,
    "force_commit",
    _original_force_commit,
    "cc094614d22c70fb",
    fixes="the commit timer committed in the middle of an agent's batch (decisions of "
    "uncommitted events in a committed transaction: decided twice after a crash)",
    proof="tests/unit/worker/test_exactly_once.py::test_an_exactly_once_commit_waits_for_the_batch_and_takes_its_writes_and_acks",
)
PARTITIONS_REVOKED = Patch(
    faust_consumer.Consumer,
    "on_partitions_revoked",
    _original_on_partitions_revoked,
    "d04b7ae72c6fc206",
    fixes="on a rebalance Faust forgot the acked messages before its revocation commit, which "
    "committed nothing and left transactions open across the rebalance",
    proof="tests/unit/worker/test_exactly_once.py::test_a_rebalance_commits_the_acked_offsets_before_faust_forgets_them",
)
COMMIT_TRANSACTIONS = Patch(
    faust_aiokafka.Producer,
    "commit_transactions",
    _original_commit_transactions,
    "70091e6f431974e9",
    fixes="a commit's partition transactions committed one after the other: one transaction's "
    "round trips per partition",
    proof="tests/unit/worker/test_exactly_once.py::test_the_partitions_transactions_are_committed_together",
)
PATCHES = (SETTINGS_EXTRA, SEND_PENDING, FORCE_COMMIT, PARTITIONS_REVOKED, COMMIT_TRANSACTIONS)


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


async def _force_commit_between_batches(
    self: Any, topics: Any = None, start_new_transaction: bool = True
) -> bool:
    """Faust's Consumer.force_commit, between the agent's batches: the offsets are read from
    the acks once the barrier is held, so a commit that waited for a batch carries that
    batch's offsets along with its records."""
    if not self.in_transaction:
        return await _original_force_commit(self, topics, start_new_transaction)
    if _barrier is None:  # immediate control delivery: acks follow sends (streams.worker.settling)
        await drain_producer_buffer(self.app.producer.buffer)
        return await _original_force_commit(self, topics, start_new_transaction)
    async with _barrier:
        await drain_producer_buffer(self.app.producer.buffer)
        return await _original_force_commit(self, topics, start_new_transaction)


async def _commit_then_revoke(self: Any, revoked: Any) -> None:
    """Commit what was processed while Faust still knows it, then revoke as upstream does."""
    if self.in_transaction and not self.app.client_only:
        await self.maybe_wait_for_commit_to_finish()  # a timer commit may be under way
        await self.commit()
    await _original_on_partitions_revoked(self, revoked)


async def commit_batch(consumer: Any) -> bool:
    """Commit what the agent has acked, now: its batch's offsets with the transactions holding
    the batch's records. Call it without the batch lock (the commit takes it).

    A commit under way may have read the acks before the batch's (it held the lock before
    the batch began), and Faust's ``commit`` would wait for it and return without committing,
    so this one waits it out first and then commits what is left (nothing, when that commit
    took the batch). Faust's ``maybe_wait_for_commit_to_finish`` returns at once when none is
    under way, so nothing starts another commit between the last check and this one.
    """
    while await consumer.maybe_wait_for_commit_to_finish():
        pass
    return bool(await consumer.commit())


async def _commit_transactions_concurrently(
    self: Any,
    tid_to_offset_map: Any,
    group_id: str,
    start_new_transaction: bool = True,
) -> None:
    """Faust's Producer.commit_transactions, the partitions' transactions committed together
    instead of one after the other: each has its own producer, lock and coordinator round
    trips. The first failure is raised once all have finished (a fenced producer crashes the
    worker in Faust's caller, as before); the others are committed or fail alike."""

    async def commit_one(transactional_id: str, offsets: Any) -> None:
        async with self._trn_locks[transactional_id]:
            transaction_producer = self._transaction_producers.get(transactional_id)
            if transaction_producer is None:
                log.warning("Commit invoked for unknown transaction %s", transactional_id)
                return
            await transaction_producer.send_offsets_to_transaction(offsets, group_id)
            await transaction_producer.commit_transaction()
            if start_new_transaction:
                await transaction_producer.begin_transaction()

    results = await asyncio.gather(
        *(commit_one(tid, offsets) for tid, offsets in tid_to_offset_map.items()),
        return_exceptions=True,
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _quick_transaction_retries(retry_backoff_ms: int) -> Any:
    """Faust's Producer._settings_extra, with aiokafka's retry backoff set for the producers
    of an exactly-once app (the others keep aiokafka's default)."""

    def settings_extra(self: Any) -> Any:
        settings = dict(_original_settings_extra(self))
        if self.app.in_transaction:
            settings["retry_backoff_ms"] = retry_backoff_ms
        return settings

    return settings_extra


def transaction_for(app: Any, tp: TP) -> str:
    """Faust's transactional id for ``tp``: one producer per partition of a topic group."""
    return f"{app.conf.id}-{app.assignor.group_for_topic(tp.topic)}-{tp.partition}"


def source_transaction(app: Any, tp: TP) -> str | None:
    """The transaction that takes what an event of ``tp`` produces: ``tp``'s own, exactly
    once; none at least once."""
    return transaction_for(app, tp) if app.in_transaction else None


async def commit_outside_batches(app: Any, tps: Iterable[TP]) -> None:
    """Commit the open transactions of ``tps`` without new offsets, for table writes made
    outside any batch (the expiry timer's deletions): else they wait in an open transaction
    for the partition's next event, and a partition that gets none keeps them until the
    broker aborts the transaction on its timeout.

    The caller holds the batch lock, so no batch is half published (or, with immediate
    control delivery, runs in the settling chain, behind every batch). Events processed but not
    yet committed have their state and decisions committed ahead of their offsets; replayed,
    they are duplicates of the stored state and publish nothing (as after a timer commit).
    A partition this worker no longer owns is skipped: its transaction goes with its owner.
    """
    if not app.in_transaction:
        return
    await drain_producer_buffer(app.producer.buffer)
    producer = app.producer
    for tid in sorted({transaction_for(app, tp) for tp in tps}):
        transaction = producer._transaction_producers.get(tid)
        if transaction is None:
            continue
        try:
            async with producer._trn_locks[tid]:
                await transaction.commit_transaction()
                await transaction.begin_transaction()
        except ProducerFenced as exc:  # another worker owns it now: as Faust's commit does
            log.warning("ProducerFenced %s", exc)
            await app.crash(exc)
        except KafkaError as exc:  # the writes stay open; the next offsets commit them
            log.warning("could not commit transaction %s outside a batch: %r", tid, exc)


def exactly_once_commits(
    barrier: asyncio.Lock, retry_backoff_ms: int = 5, between_batches: bool = True
) -> None:
    """Install the patches; ``barrier`` is the lock the guarding agent holds per batch,
    ``retry_backoff_ms`` the transactional producers' retry backoff. ``between_batches``
    False (immediate control delivery): a commit does not wait for the agent's batch, since
    every batch acks its events only once its records are sent (:mod:`settling`)."""
    global _barrier
    _barrier = barrier if between_batches else None
    replace(SETTINGS_EXTRA, _quick_transaction_retries(retry_backoff_ms))
    replace(SEND_PENDING, _counted_send_pending)
    replace(FORCE_COMMIT, _force_commit_between_batches)
    replace(PARTITIONS_REVOKED, _commit_then_revoke)
    replace(COMMIT_TRANSACTIONS, _commit_transactions_concurrently)
