"""Failover in seconds: a promoted standby starts where it is, a kept partition is not read
again, and table recovery ends as soon as the changelog has been read (faust-streaming 0.15.3;
issue 26).

Standby offsets: with the in-memory store (``persisted_offset`` is always None) Faust forgets
how far a standby replica had read when its partition becomes active, and recovers the active
partition from the start of its changelog again, although the table holds it all already: a
standby saved nothing. :func:`fast_failover` carries the standby's offset over, so the
promoted partition reads only what the standby had not yet read (the table holds what the
standby read: below).

Standby keys: the promoted standby's reading starts where it stopped only because the table
still holds what it read. Faust's memory store drops, at the end of every recovery, the keys
it read from the changelog of any partition that is not active here (``Store.
on_recovery_completed``), standby partitions included, while recovery keeps the standby's
offset: a partition that stayed a standby across one more rebalance lost every key read
before it, and when promoted later its runs started again from nothing (their counts began
anew: warnings, blocks and aborts went missing). The store now keeps the keys of standby
partitions too; only a partition that is neither active nor a standby here is dropped (its
offset goes with it: Faust's ``Recovery.revoke``).

Live writes: Faust's memory store notes a key's partition only when it reads the key from a
changelog, so the states the worker writes itself were never dropped when their partition left
it (neither active nor a standby here any more): they stayed in memory, outside every expiry
sweep (which sweeps the partitions active here). The guarding agent notes each state it writes
(:func:`note_written`) and run expiry forgets each it drops (:func:`forget`), so a recovery
drops them like the keys it read.

Kept partitions: likewise Faust forgets that a partition it keeps across a rebalance is up to
date (its active offset is where its last recovery stopped, not what the worker wrote since),
and re-read each kept partition's changelog at every rebalance: everything the worker had
written since it started. A partition kept active after a finished recovery starts at its
highwater. "Finished" is the recovery's completion (``Recovery.on_recovery_completed``, which
:mod:`streams.worker.faust_patches` reports with :func:`mark_recovered`), not Faust's
``in_recovery`` flag: Faust's changelog reader clears that flag whenever it finds nothing left
to read, which it also finds when its 5 s idle tick lands after a recovery started and before
its offsets were read. A rebalance right after that took every partition for kept: a
replacement worker started at the highwaters with empty tables and decided the rest of its runs
from nothing (CI: ``test_replacement_of_an_idle_worker_recovers_the_newest_state``, the
replacement kicked out of the group once while starting).

Own writes: a kept partition's changelog is read from its last stable offset on whenever
another partition recovers (Faust resumes every active changelog partition for the read), and
the read applies whatever it fetches. Exactly once, this worker's own writes that committed
after the offset was listed (batches decided meanwhile) were read back, oldest first, cut off
where recovery paused the partition: runs went back to an older state while the events after
it stayed committed, and their next events waited behind the gap for good (CI's
join-then-leave failures). A changelog partition this worker writes (kept across the
rebalance, or any active one once its recovery completed: :func:`written_here`) is never read
back into its table.

Transaction markers: exactly once, a changelog partition ends with a commit marker, never a
record, so the recovery's offsets stay one short of the end offset and Faust only notices that
the partition is read after its changelog queue was empty for two 5 s timeouts
(``detect_aborted_tx`` in ``Recovery._slurp_changelogs``): every rebalance that recovered
anything took at least 10 s. A watcher (installed by the same :func:`fast_failover`) decides
it within a fraction of a second, exactly: the consumer's position after the last fetch has
passed the end offset (aiokafka steps over control batches), that fetch's records were all
queued (Faust asks for the next batch only then), and the queue is drained.

Highwaters: exactly once, Faust takes a changelog partition's recovery target from the last
stable offset of the consumer's last fetch response for it, which a partition just assigned
has not had yet: -1, "nothing to recover". A replacement worker then skipped recovery, and a
promoted standby neither read the tail it had missed nor could start from its own offset
(Faust's consistency check: offset above highwater, crash). The targets come from a ListOffsets
request instead, read committed like the consumer: the last stable offset.

Transactional producers: Faust stops the producer of a revoked partition only if the partition
is not a standby in the new assignment, and with standby replicas a partition that leaves a
worker usually stays there as a standby. Its producer lived on, was fenced by the new owner's,
and when the partition came back (the other worker killed: failover) Faust reused the fenced
producer and the worker crashed (ProducerFenced). Every producer of a partition that is not
active here any more is stopped at each rebalance.

Fetch snapshot (with the resume order of :mod:`streams.worker.faust_patches`): Faust hands its
live set of active partitions to the consumer thread, and aiokafka reads an *empty* set as
"every partition". When recovery paused the last active partition while a fetch was on its
way (between "Done reading from changelog topics" and the stream partitions' resume), aiokafka
handed over the paused partitions' records, Faust discarded them as inactive, and the
consumer's position had already moved past them: lost events. The one replacement of
``getmany`` fetches from the set as it was when Faust decided to fetch, and notes during
recovery what the fetch handed over (for the end watcher above).

Each patch is declared as a :class:`~streams.worker.patching.Patch` below; the inventory and
the order they are installed in: :mod:`streams.worker.faust_layer`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from faust.stores import memory as faust_memory
from faust.tables import recovery as faust_recovery
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.worker.patching import Patch, Reliance, replace

log = logging.getLogger("loopguard.worker")

_original_on_rebalance = faust_recovery.Recovery.on_rebalance
_original_highwaters = faust_aiokafka.AIOKafkaConsumerThread._highwaters
_original_transactions_rebalance = faust_consumer.TransactionManager.on_rebalance
_original_build_offsets = faust_recovery.Recovery._build_offsets
_original_thread_getmany = faust_aiokafka.AIOKafkaConsumerThread.getmany
_slurp = faust_recovery.Recovery._slurp_changelogs
_original_store_recovery_completed = faust_memory.Store.on_recovery_completed
_original_store_apply_changelog_batch = faust_memory.Store.apply_changelog_batch

GETMANY = Patch(
    faust_aiokafka.AIOKafkaConsumerThread,
    "getmany",
    _original_thread_getmany,
    "26fc5fc9f3b667e1",
    fixes="an emptied live partition set read by aiokafka as 'every partition' (paused "
    "partitions' records dropped, positions moved past them); and recovery's end noticed "
    "only after two 5 s timeouts (the fetches are noted for the end watcher)",
    proof="tests/unit/worker/test_faust_patches.py::test_an_empty_partition_set_fetches_nothing",
)
ON_REBALANCE = Patch(
    faust_recovery.Recovery,
    "on_rebalance",
    _original_on_rebalance,
    "aa4d997a1795ceae",
    fixes="a promoted standby recovered its partition from the changelog's start (the memory "
    "store forgets the standby's offset), and kept partitions were read again at every rebalance",
    proof="tests/unit/worker/test_fast_failover.py::test_a_promoted_standby_starts_where_it_stopped",
)
BUILD_OFFSETS = Patch(
    faust_recovery.Recovery,
    "_build_offsets",
    _original_build_offsets,
    "27eec86be06cb51f",
    fixes="a partition kept active across a rebalance re-read everything the worker wrote since "
    "it started",
    proof="tests/unit/worker/test_fast_failover.py::test_a_kept_partition_starts_at_its_highwater",
)
HIGHWATERS = Patch(
    faust_aiokafka.AIOKafkaConsumerThread,
    "_highwaters",
    _original_highwaters,
    "a7f4f97d9f32aca2",
    fixes="exactly once, a partition just assigned has no last stable offset yet (-1, 'nothing "
    "to recover'): a replacement skipped recovery, a promoted standby crashed",
    proof="tests/unit/worker/test_fast_failover.py::test_highwaters_are_the_listed_end_offsets",
)
TRANSACTIONS_REBALANCE = Patch(
    faust_consumer.TransactionManager,
    "on_rebalance",
    _original_transactions_rebalance,
    "2c190b35003af25c",
    fixes="a revoked partition kept as a standby kept its transactional producer, fenced by "
    "the new owner: on failover back, ProducerFenced crashed the worker",
    proof="tests/unit/worker/test_fast_failover.py::"
    "test_producers_of_partitions_gone_are_stopped_at_a_rebalance",
)
STANDBY_KEYS = Patch(
    faust_memory.Store,
    "on_recovery_completed",
    _original_store_recovery_completed,
    "a00bef343e139602",
    fixes="the memory store dropped a standby partition's keys at every recovery's end while "
    "recovery kept its offset: promoted after one more rebalance, its runs started from nothing",
    proof="tests/unit/worker/test_fast_failover.py::"
    "test_a_standby_keeps_the_keys_it_read_across_a_rebalance",
)
OWN_WRITES = Patch(
    faust_memory.Store,
    "apply_changelog_batch",
    _original_store_apply_changelog_batch,
    "71863e3cd727aac2",
    fixes="another partition's recovery read the changelog of a partition kept active here "
    "from its last stable offset on: this worker's own writes committed meanwhile, older "
    "states first, cut off where recovery paused the partition; runs went back to an older "
    "state past events already committed, which then waited behind the gap for good",
    proof="tests/unit/worker/test_fast_failover.py::"
    "test_a_changelog_this_worker_writes_is_never_read_back_into_its_table",
)
PATCHES = (
    GETMANY,
    ON_REBALANCE,
    BUILD_OFFSETS,
    HIGHWATERS,
    TRANSACTIONS_REBALANCE,
    STANDBY_KEYS,
    OWN_WRITES,
)
# Not replaced, but the end watcher relies on how it takes events off the queue and moves
# the active offsets.
RELIED_ON = (
    Reliance("Recovery._slurp_changelogs", getattr(_slurp, "fun", _slurp), "7825c7e50f766d5a"),
)
POLL_SECONDS = 0.05


class _Fetches:
    """What the last fetch (``AIOKafkaConsumerThread.getmany``) handed over, during recovery:
    the consumer's positions right after it (nothing is fetched between two getmany calls) and
    whether its records are still being queued (until the fetcher asks for the next batch)."""

    positions: dict[Any, int] = {}
    handing_over = False
    started_at = 0.0  # when that fetch began (positions from before a recovery's seek are stale)


async def _positions(consumer: Any) -> dict[Any, int]:
    """Every assigned partition's position (runs on the consumer's thread)."""
    return {tp: await consumer.position(tp) for tp in consumer.assignment()}


async def _on_rebalance(
    self: Any, assigned: Any, revoked: Any, newly_assigned: Any, generation_id: int = 0
) -> None:
    """Faust's Recovery.on_rebalance; a partition that was a standby here and is now active
    starts reading its changelog where the standby stopped, one that stays active here (its
    recovery had completed: :func:`mark_recovered`) at its end."""
    kept = set(getattr(self, "loopguard_recovered", ())) - set(revoked)
    self.loopguard_recovered = set()  # until this rebalance's recovery completes
    self.loopguard_rebalances = getattr(self.app, "rebalancing_count", 0)
    standby = {
        tp: offset
        for tp, offset in self.standby_offsets.items()
        if offset is not None and tp not in revoked
    }
    await _original_on_rebalance(self, assigned, revoked, newly_assigned, generation_id)
    for tp in self.active_tps:
        if self.active_offsets.get(tp) is None and tp in standby:
            self.active_offsets[tp] = standby[tp]
            log.info("changelog %s was a standby here: recovery starts at %d", tp, standby[tp])
    self.loopguard_kept = kept & self.active_tps
    if getattr(self, "loopguard_end_watch", None) is None:
        self.loopguard_end_watch = asyncio.ensure_future(_end_when_read(self))


async def _store_recovery_completed(self: Any, active_tps: Any, standby_tps: Any) -> None:
    """Faust's memory Store.on_recovery_completed, keeping the keys of standby partitions:
    drops only what was read from partitions neither active nor a standby here."""
    kept = {tp.partition for tp in active_tps} | {tp.partition for tp in standby_tps}
    gone = [key for key, partition in self._key_partition.items() if partition not in kept]
    for key in gone:
        self.data.pop(key, None)
        self._key_partition.pop(key, None)


def _store_apply_changelog_batch(
    self: Any, batch: Any, to_key: Callable[[Any], Any], to_value: Callable[[Any], Any]
) -> None:
    """Faust's memory Store.apply_changelog_batch, less the records of changelog partitions
    this worker writes (:func:`written_here`): the table holds their newest states already."""
    owned = written_here(self.app.tables.recovery)
    if owned:
        batch = [event for event in batch if event.message.tp not in owned]
    _original_store_apply_changelog_batch(self, batch, to_key, to_value)


def written_here(recovery: Any) -> set[Any]:
    """The changelog partitions whose records only this worker writes now: those kept active
    across the last rebalance (recovered before it) and, once this rebalance's recovery has
    completed, all its active ones."""
    kept = getattr(recovery, "loopguard_kept", set())
    return kept | getattr(recovery, "loopguard_recovered", set())


def note_written(store: Any, key: Any, partition: int) -> None:
    """Note the changelog partition of a state this worker wrote itself to the memory
    ``store`` (a table's ``data``), as Faust notes what it reads from a changelog, so that the
    key goes when its partition leaves this worker (:func:`_store_recovery_completed`)."""
    store._key_partition[key] = partition


def forget(store: Any, key: Any) -> None:
    """Drop ``key`` from the memory ``store`` with its noted partition (run expiry)."""
    store.data.pop(key, None)
    store._key_partition.pop(key, None)


def rebalanced_again(recovery: Any, generation_id: int) -> bool:
    """Whether another rebalance began since ``recovery``'s (of ``generation_id``) was
    assigned: started (Faust counts a rebalance as it revokes) or assigned already. The
    streams and the partitions' marks are then the next recovery's."""
    app = recovery.app
    started = getattr(app, "rebalancing_count", 0)
    return app.consumer_generation_id != generation_id or started != getattr(
        recovery, "loopguard_rebalances", started
    )


def mark_recovered(recovery: Any) -> None:
    """Note that ``recovery`` completed: its active partitions' tables now hold everything up
    to their highwaters, and whatever the worker writes from here on (kept partitions)."""
    recovery.loopguard_recovered = set(recovery.active_tps)


def _behind(recovery: Any) -> dict[Any, int]:
    """Active changelog partitions whose applied offset is short of the highwater."""
    offsets = recovery.active_offsets
    return {
        tp: highwater
        for tp, highwater in recovery.active_highwaters.items()
        if highwater is not None and offsets.get(tp) is not None and offsets[tp] < highwater
    }


async def _read_to_end(recovery: Any, behind: dict[Any, int]) -> bool:
    """Whether every record before each partition's end offset was fetched and applied."""
    positions, handing_over = _Fetches.positions, _Fetches.handing_over  # one fetch's pair
    # Faust stamps the recovery's start again after seeking the changelogs to their offsets.
    if _Fetches.started_at <= (recovery._recovery_started_at or 0.0) or handing_over:
        return False
    if any(positions.get(tp, -1) <= hw for tp, hw in behind.items()):
        return False  # highwater = end offset - 1: the fetches have not passed the end yet
    queue = recovery.tables.changelog_queue
    while not queue.empty():
        if not recovery.in_recovery or recovery.should_stop:
            return False
        await asyncio.sleep(POLL_SECONDS)
    await asyncio.sleep(POLL_SECONDS)  # the slurper moves the offsets of its last event
    return queue.empty()


async def _end_when_read(recovery: Any) -> None:
    """While recovery runs: end it once only transaction markers are left to read."""
    while not recovery.should_stop:
        await asyncio.sleep(POLL_SECONDS)
        if not recovery.in_recovery or recovery.signal_recovery_end.is_set():
            continue
        behind = _behind(recovery)
        if not behind:
            continue
        highwaters = dict(recovery.active_highwaters)
        try:
            done = await _read_to_end(recovery, behind)
        except Exception as exc:  # never let the watcher die; Faust's own 10 s path remains
            log.warning("recovery end watcher: %r", exc)
            continue
        if not done or not recovery.in_recovery or highwaters != recovery.active_highwaters:
            continue
        for tp, highwater in _behind(recovery).items():
            if tp in behind:
                log.info("changelog %s read to its end: only transaction markers left", tp)
                recovery.active_offsets[tp] = highwater
        if recovery.in_recovery and not recovery.need_recovery():
            recovery.flush_buffers()
            recovery._set_recovery_ended()
            recovery.signal_recovery_end.set()


async def _highwaters(self: Any, partitions: Any) -> Any:
    """End offsets as the broker lists them, at the consumer's isolation level (read committed:
    the last stable offset), never the last fetch response's figure."""
    return await self._ensure_consumer().end_offsets(partitions)


async def _build_offsets(self: Any, consumer: Any, tps: Any, destination: Any, title: str) -> None:
    """Faust's Recovery._build_offsets; a partition kept active starts at its highwater (built
    just before): this worker wrote everything in its changelog since its last recovery."""
    await _original_build_offsets(self, consumer, tps, destination, title)
    if title != "active":
        return
    for tp in getattr(self, "loopguard_kept", set()) & set(tps):
        highwater = self.active_highwaters.get(tp)
        if highwater is not None and highwater > (destination.get(tp) or -1):
            destination[tp] = highwater


async def _transactions_on_rebalance(
    self: Any, assigned: Any, revoked: Any, newly_assigned: Any
) -> None:
    """Faust's TransactionManager.on_rebalance, first stopping every transactional producer
    of a partition this worker no longer owns as active."""
    keep = self._tps_to_transactional_ids(assigned)
    stale = sorted(set(self.producer._transaction_producers) - keep)
    if stale:
        log.info("stopping the transactional producers of partitions gone: %s", stale)
        await self._stop_transactions(stale)
    await _original_transactions_rebalance(self, assigned, revoked, newly_assigned)


async def _getmany(self: Any, active_partitions: Any, timeout: float) -> Any:
    """Fetch from a snapshot of the partitions active now (an empty set fetches nothing, never
    "all"); the fetch, and the hand-over of the one before, noted for the stage-age metric
    (:class:`streams.observability.stage_ages.StageAges`, when the app has one) and for the
    idle back-off (:class:`streams.worker.fetch_backoff.FetchBackoff`); during
    recovery, note the positions right after the fetch and whether its records are still
    being queued (the fetcher asks again only once they are)."""
    _Fetches.handing_over = False  # the fetcher queued the last batch before asking again
    ages = getattr(self.app, "loopguard_stage_ages", None)  # set by the composition root
    if ages is not None:
        ages.fetching()  # the last fetch's records are all with the streams now
    started_at = time.monotonic()
    records = await _fetch_snapshot(self, active_partitions, timeout)
    if ages is not None and records:
        ages.fetched(records)
    # An idle consumer's fetch wait backs off (streams.worker.fetch_backoff).
    backoff = getattr(self.app, "loopguard_fetch_backoff", None)  # set by the composition root
    if backoff is not None:
        backoff.after_fetch(self._ensure_consumer(), bool(records))
    if self.app.in_recovery:
        positions = await self.call_thread(_positions, self._ensure_consumer())
        _Fetches.positions, _Fetches.handing_over = positions, bool(records)
        _Fetches.started_at = started_at
    return records


async def _fetch_snapshot(self: Any, active_partitions: Any, timeout: float) -> Any:
    """Fetch from the partitions active now; never let a later-emptied set mean "all"."""
    if active_partitions is not None:
        active_partitions = frozenset(active_partitions)
        if not active_partitions:
            return {}
    return await _original_thread_getmany(self, active_partitions, timeout)


def fast_failover() -> None:
    """Install all seven: the fetch snapshot (and fetches noted for the recovery end watcher),
    standby offsets kept on promotion, kept partitions not re-read, listed highwaters, stale
    transactional producers stopped, standby keys kept, own writes never read back."""
    replace(GETMANY, _getmany)
    replace(ON_REBALANCE, _on_rebalance)
    replace(BUILD_OFFSETS, _build_offsets)
    replace(HIGHWATERS, _highwaters)
    replace(TRANSACTIONS_REBALANCE, _transactions_on_rebalance)
    replace(STANDBY_KEYS, _store_recovery_completed)
    replace(OWN_WRITES, _store_apply_changelog_batch)
