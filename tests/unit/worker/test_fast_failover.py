"""The failover patches of streams/worker/fast_failover.py, on stand-ins for Faust's recovery,
consumer and transaction manager; each test fails on Faust's own method. End to end:
tests/integration/test_kafka_failover.py and test_reliability.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.stores import memory as faust_memory
from faust.types import TP

from streams.worker import fast_failover

CHANGELOG = TP("lg-runs-changelog", 3)


def recovery(**state: Any) -> Any:
    """Faust's Recovery as on_rebalance and _build_offsets read it (the end watcher running)."""
    values = dict(
        in_recovery=False,
        _recovery_ended_at=None,
        active_tps=set(),
        standby_offsets={},
        active_offsets={},
        active_highwaters={},
        loopguard_end_watch="running",
        app=SimpleNamespace(rebalancing_count=1, consumer_generation_id=1),
    )
    return SimpleNamespace(**{**values, **state})


def test_a_promoted_standby_starts_where_it_stopped(monkeypatch) -> None:
    async def faust_on_rebalance(
        self: Any, assigned: Any, revoked: Any, new: Any, gen: int
    ) -> None:
        self.active_tps = {CHANGELOG}  # promoted: Faust forgets how far the standby had read
        self.active_offsets[CHANGELOG] = None

    monkeypatch.setattr(fast_failover, "_original_on_rebalance", faust_on_rebalance)
    state = recovery(standby_offsets={CHANGELOG: 41})
    asyncio.run(fast_failover._on_rebalance(state, {CHANGELOG}, set(), {CHANGELOG}, 2))
    assert state.active_offsets[CHANGELOG] == 41  # not None: the start of the changelog


def test_a_kept_partition_starts_at_its_highwater(monkeypatch) -> None:
    async def faust_build_offsets(self: Any, consumer: Any, tps: Any, dest: Any, title: str):
        for tp in tps:
            dest[tp] = 10  # where its last recovery stopped, not what the worker wrote since

    monkeypatch.setattr(fast_failover, "_original_build_offsets", faust_build_offsets)
    state = recovery(loopguard_kept={CHANGELOG}, active_highwaters={CHANGELOG: 99})
    offsets: dict[TP, int] = {}
    asyncio.run(fast_failover._build_offsets(state, None, {CHANGELOG}, offsets, "active"))
    assert offsets == {CHANGELOG: 99}
    standby: dict[TP, int] = {}
    asyncio.run(fast_failover._build_offsets(state, None, {CHANGELOG}, standby, "standby"))
    assert standby == {CHANGELOG: 10}


def test_highwaters_are_the_listed_end_offsets() -> None:
    """Faust took the last fetch response's stable offset: -1 for a partition just assigned."""

    class Consumer:
        async def end_offsets(self, partitions: Any) -> dict[TP, int]:
            return {tp: 500 for tp in partitions}

    thread = SimpleNamespace(_ensure_consumer=Consumer)
    assert asyncio.run(fast_failover._highwaters(thread, [CHANGELOG])) == {CHANGELOG: 500}


def test_producers_of_partitions_gone_are_stopped_at_a_rebalance(monkeypatch) -> None:
    calls: list[Any] = []

    async def faust_rebalance(self: Any, assigned: Any, revoked: Any, new: Any) -> None:
        calls.append("faust")  # stops only producers of partitions that are no standby here

    async def stop(tids: list[str]) -> None:
        calls.append(("stopped", tids))

    monkeypatch.setattr(fast_failover, "_original_transactions_rebalance", faust_rebalance)
    manager = SimpleNamespace(
        producer=SimpleNamespace(_transaction_producers={"lg-0-1": 1, "lg-0-3": 3}),
        _tps_to_transactional_ids=lambda assigned: {f"lg-0-{tp.partition}" for tp in assigned},
        _stop_transactions=stop,
    )
    asyncio.run(fast_failover._transactions_on_rebalance(manager, {TP("ev", 1)}, set(), set()))
    assert calls == [("stopped", ["lg-0-3"]), "faust"]


def test_a_standby_keeps_the_keys_it_read_across_a_rebalance() -> None:
    """A recovery ends with partition 3 still a standby here and partition 5 gone: Faust's
    store dropped the standby's keys too (its offset kept: promoted later, its runs started
    from nothing); the patch drops only the gone partition's."""

    def store() -> Any:
        return SimpleNamespace(
            data={b"active": 1, b"standby": 2, b"gone": 3, b"written-live": 4},
            _key_partition={b"active": 1, b"standby": 3, b"gone": 5},
        )

    actives, standbys = {TP("lg-runs-changelog", 1)}, {CHANGELOG}
    faust_store = store()
    asyncio.run(fast_failover._original_store_recovery_completed(faust_store, actives, standbys))
    assert b"standby" not in faust_store.data  # what the patch fixes

    patched = store()
    asyncio.run(fast_failover._store_recovery_completed(patched, actives, standbys))
    assert patched.data == {b"active": 1, b"standby": 2, b"written-live": 4}
    assert patched._key_partition == {b"active": 1, b"standby": 3}


def test_a_state_written_here_goes_when_its_partition_leaves() -> None:
    """Faust notes a key's partition only when it reads it from a changelog: a state the
    worker wrote itself stayed after its partition left. Noted (note_written), it goes with
    the partition, and stays while the partition is a standby here."""
    table = SimpleNamespace(name="runs")
    faust_store = faust_memory.Store("memory://", app=SimpleNamespace(conf=None), table=table)
    fast_failover.note_written(faust_store, b"run-a", 5)  # what the guarding agent does
    faust_store[b"run-a"] = "state"
    fast_failover.note_written(faust_store, b"run-b", 3)
    faust_store[b"run-b"] = "state"
    actives, standbys = {TP("lg-runs-changelog", 1)}, {CHANGELOG}  # 5 left, 3 a standby
    asyncio.run(fast_failover._store_recovery_completed(faust_store, actives, standbys))
    assert dict(faust_store.data) == {b"run-b": "state"}

    fast_failover.forget(faust_store, b"run-b")  # run expiry
    assert not faust_store.data and not faust_store._key_partition


def test_only_a_completed_recovery_makes_its_partitions_kept(monkeypatch) -> None:
    """Faust's reader marks a recovery ended whenever it finds nothing left to read, also
    before the recovery's offsets were read; a rebalance then took every partition for kept
    (started at its highwater, tables empty). Only mark_recovered makes them kept."""

    async def faust_on_rebalance(self: Any, assigned: Any, revoked: Any, new: Any, gen: int):
        self.active_tps = {CHANGELOG}

    monkeypatch.setattr(fast_failover, "_original_on_rebalance", faust_on_rebalance)
    state = recovery(active_tps={CHANGELOG}, _recovery_ended_at=1e12)  # ended, not completed
    asyncio.run(fast_failover._on_rebalance(state, {CHANGELOG}, set(), set(), 5))
    assert state.loopguard_kept == set()  # recovered from the changelog again

    fast_failover.mark_recovered(state)  # this rebalance's recovery completed
    asyncio.run(fast_failover._on_rebalance(state, {CHANGELOG}, set(), set(), 6))
    assert state.loopguard_kept == {CHANGELOG}
    asyncio.run(fast_failover._on_rebalance(state, {CHANGELOG}, set(), set(), 7))
    assert state.loopguard_kept == set()  # gen 6's recovery never completed

    fast_failover.mark_recovered(state)
    asyncio.run(fast_failover._on_rebalance(state, set(), {CHANGELOG}, set(), 8))
    assert state.loopguard_kept == set()  # revoked: another worker wrote it meanwhile


def changelog_event(partition: int, key: bytes, value: str) -> Any:
    """A changelog record as the recovery hands it to a table's store."""
    tp = TP("lg-runs-changelog", partition)
    message = SimpleNamespace(tp=tp, partition=partition, value=value)
    return SimpleNamespace(key=key, value=value, message=message)


def test_a_changelog_this_worker_writes_is_never_read_back_into_its_table() -> None:
    """Partition 3 was kept active here across the rebalance; partition 1 is recovering (a
    standby promoted). Another partition's recovery fetched partition 3's changelog from its
    last stable offset on: this worker's own writes, oldest first, cut off where recovery
    paused it. Faust applied them (the run went back to an older state past committed
    events); the patch applies only partition 1's, until its recovery completes too."""
    kept = TP("lg-runs-changelog", 3)
    batch = [
        changelog_event(3, b"kept-run", "state at seq 10"),
        changelog_event(1, b"promoted-run", "state read from the changelog"),
    ]

    def store(recovery: Any) -> Any:
        app = SimpleNamespace(conf=None, tables=SimpleNamespace(recovery=recovery))
        made = faust_memory.Store("memory://", app=app, table=SimpleNamespace(name="runs"))
        made.data[b"kept-run"] = "state at seq 23"  # decided and written here
        return made

    def keep(value: Any) -> Any:
        return value

    during = SimpleNamespace(loopguard_kept={kept}, loopguard_recovered=set())
    faust_store = store(during)
    fast_failover._original_store_apply_changelog_batch(faust_store, batch, keep, keep)
    assert faust_store.data[b"kept-run"] == "state at seq 10"  # what the patch fixes

    patched = store(during)
    fast_failover._store_apply_changelog_batch(patched, batch, keep, keep)
    assert dict(patched.data) == {
        b"kept-run": "state at seq 23",
        b"promoted-run": "state read from the changelog",
    }

    # Once this rebalance's recovery completed, every active partition is this worker's.
    after = SimpleNamespace(loopguard_kept={kept}, loopguard_recovered={TP("lg-runs-changelog", 1)})
    later = store(after)
    later.data[b"promoted-run"] = "state decided here since"
    fast_failover._store_apply_changelog_batch(later, batch, keep, keep)
    assert dict(later.data) == {
        b"kept-run": "state at seq 23",
        b"promoted-run": "state decided here since",
    }


def test_a_rebalance_since_the_assignment_is_seen_from_its_start() -> None:
    """Faust counts a rebalance as its revocation begins, before the new generation is known."""
    assigned = SimpleNamespace(
        app=SimpleNamespace(rebalancing_count=4, consumer_generation_id=7), loopguard_rebalances=4
    )
    assert not fast_failover.rebalanced_again(assigned, 7)
    assigned.app.rebalancing_count = 5  # revoking
    assert fast_failover.rebalanced_again(assigned, 7)
    assigned.app.rebalancing_count, assigned.app.consumer_generation_id = 4, 8
    assert fast_failover.rebalanced_again(assigned, 7)
