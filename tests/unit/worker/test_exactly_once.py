"""The exactly-once commit patches of streams/worker/exactly_once.py, on stand-ins for Faust's.

End to end: tests/integration/test_reliability.py and test_kafka_failover.py on Apache Kafka
with LOOPGUARD_PROCESSING_GUARANTEE=exactly_once (zero decisions twice, read committed).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError, ProducerFenced
from faust.transport import consumer as faust_consumer
from faust.types import TP

from streams.worker import exactly_once


class Buffer:
    """Faust's ProducerBuffer as the patches see it: a queue drained by its own task."""

    def __init__(self, send_delay: float = 0.0) -> None:
        self.pending: asyncio.Queue[str] = asyncio.Queue()
        self.should_stop = False
        self.sent: list[str] = []
        self.send_delay = send_delay

    async def _send_pending(self, fut: str) -> None:
        await exactly_once._counted_send_pending(self, fut)

    async def run(self) -> None:  # ProducerBuffer._handle_pending
        while not self.should_stop:
            await self._send_pending(await self.pending.get())


@pytest.fixture(autouse=True)
def slow_original_send(monkeypatch) -> None:
    async def send(buffer: Buffer, fut: str) -> None:  # hands over after a broker round trip
        await asyncio.sleep(buffer.send_delay)
        buffer.sent.append(fut)

    monkeypatch.setattr(exactly_once, "_original_send_pending", send)


def test_the_drain_waits_for_queued_and_in_flight_messages_and_keeps_their_order() -> None:
    async def scenario() -> list[str]:
        buffer = Buffer(send_delay=0.01)
        task = asyncio.create_task(buffer.run())
        for n in range(5):
            buffer.pending.put_nowait(f"state-{n}")
        await asyncio.sleep(0)  # the buffer's task has taken the first one: it is in flight
        await exactly_once.drain_producer_buffer(buffer)
        sent = list(buffer.sent)
        task.cancel()
        return sent

    assert asyncio.run(scenario()) == [f"state-{n}" for n in range(5)]


def test_a_stopped_buffer_is_drained_by_the_caller_in_order() -> None:
    async def scenario() -> list[str]:
        buffer = Buffer()
        buffer.should_stop = True
        for n in range(3):
            buffer.pending.put_nowait(f"m{n}")
        await exactly_once.drain_producer_buffer(buffer)
        return buffer.sent

    assert asyncio.run(scenario()) == ["m0", "m1", "m2"]


class Consumer:
    """Faust's Consumer as the commit patch sees it: ``force_commit`` reads the acks."""

    def __init__(self, in_transaction: bool, buffer: Buffer) -> None:
        self.in_transaction = in_transaction
        self.app = SimpleNamespace(producer=SimpleNamespace(buffer=buffer))
        self.acked: list[int] = []


def commit_recorder(monkeypatch, log: list[Any]) -> None:
    async def force_commit(consumer: Consumer, topics: Any, start_new_transaction: bool) -> bool:
        offsets, consumer.acked = consumer.acked, []
        log.append(("commit", offsets, list(consumer.app.producer.buffer.sent)))
        return True

    monkeypatch.setattr(exactly_once, "_original_force_commit", force_commit)


def test_an_exactly_once_commit_waits_for_the_batch_and_takes_its_writes_and_acks(
    monkeypatch,
) -> None:
    log: list[Any] = []
    commit_recorder(monkeypatch, log)

    async def scenario() -> None:
        barrier = asyncio.Lock()
        monkeypatch.setattr(exactly_once, "_barrier", barrier)
        buffer = Buffer(send_delay=0.005)
        task = asyncio.create_task(buffer.run())
        consumer = Consumer(True, buffer)
        consumer.acked = [6]  # acked before the batch
        async with barrier:  # the agent is in the middle of a batch
            commit = asyncio.create_task(exactly_once._force_commit_between_batches(consumer))
            await asyncio.sleep(0.02)
            assert not commit.done() and log == []  # never splits a batch
            buffer.pending.put_nowait("run-1 state")  # the batch's table write, at its end
            consumer.acked.append(7)  # the agent acks the batch before it lets go
            log.append("batch done")
        assert await commit
        task.cancel()

    asyncio.run(scenario())
    # The commit that waited took the batch's offsets too, with its buffered write.
    assert log == ["batch done", ("commit", [6, 7], ["run-1 state"])]


def test_at_least_once_commits_pass_straight_through(monkeypatch) -> None:
    log: list[Any] = []
    commit_recorder(monkeypatch, log)

    async def scenario() -> None:
        barrier = asyncio.Lock()
        monkeypatch.setattr(exactly_once, "_barrier", barrier)
        consumer = Consumer(False, Buffer())
        consumer.acked = [3]
        async with barrier:
            assert await exactly_once._force_commit_between_batches(consumer)

    asyncio.run(scenario())
    assert log == [("commit", [3], [])]


class RevokingConsumer:
    """What Faust's Consumer.on_partitions_revoked does first: forget the acked offsets."""

    def __init__(self, in_transaction: bool) -> None:
        self.in_transaction = in_transaction
        self.app = SimpleNamespace(client_only=False)
        self.acked = {"events-0": 41}
        self.log: list[Any] = []

    async def maybe_wait_for_commit_to_finish(self) -> bool:
        return False

    async def commit(self) -> bool:
        self.log.append(("commit", dict(self.acked)))
        return True


@pytest.mark.parametrize("in_transaction", [True, False])
def test_a_rebalance_commits_the_acked_offsets_before_faust_forgets_them(
    monkeypatch, in_transaction: bool
) -> None:
    async def upstream(consumer: RevokingConsumer, revoked: set[str]) -> None:
        consumer.acked.clear()  # upstream pops _acked/_committed_offset, then commits nothing
        consumer.log.append(("revoked", sorted(revoked)))

    monkeypatch.setattr(exactly_once, "_original_on_partitions_revoked", upstream)
    consumer = RevokingConsumer(in_transaction)
    asyncio.run(exactly_once._commit_then_revoke(consumer, {"events-0"}))
    revoked = ("revoked", ["events-0"])
    committed = [("commit", {"events-0": 41})] if in_transaction else []
    assert consumer.log == [*committed, revoked]


# -- the source partition's transaction ---------------------------------------------------


class Producer:
    """Faust's aiokafka Producer as the send and commit patches see it."""

    def __init__(self, owned: list[str] | None = None) -> None:
        self.sent: list[tuple[str, int | None, str | None]] = []
        self.buffer = Buffer()
        self.log: list[Any] = []
        self._transaction_producers = {tid: Transaction(tid, self.log) for tid in owned or []}
        self._trn_locks = {tid: asyncio.Lock() for tid in owned or []}

    async def send(
        self, topic, key, value, partition, timestamp, headers, *, transactional_id=None
    ) -> None:
        self.sent.append((topic, partition, transactional_id))


class Transaction:
    """An aiokafka transactional producer: records its commits and begins."""

    def __init__(self, tid: str, log: list[Any], fails: BaseException | None = None) -> None:
        self.tid, self.log, self.fails = tid, log, fails

    async def commit_transaction(self) -> None:
        if self.fails is not None:
            raise self.fails
        self.log.append(("commit", self.tid))

    async def begin_transaction(self) -> None:
        self.log.append(("begin", self.tid))


def app_with(producer: Producer, in_transaction: bool = True) -> SimpleNamespace:
    # Faust numbers co-partitioned topic groups; ours (same partition count) are all group 0.
    assignor = SimpleNamespace(group_for_topic=lambda topic: 0)
    crashed: list[BaseException] = []

    async def crash(exc: BaseException) -> None:
        crashed.append(exc)

    return SimpleNamespace(
        conf=SimpleNamespace(id="lg"),
        assignor=assignor,
        producer=producer,
        in_transaction=in_transaction,
        crash=crash,
        crashed=crashed,
    )


# -- writes outside any batch -------------------------------------------------------------


def test_writes_outside_a_batch_are_committed_in_their_partitions_transactions(
    monkeypatch,
) -> None:
    producer = Producer(owned=["lg-0-1", "lg-0-3"])
    app = app_with(producer)

    async def sent(buffer: Buffer, fut: str) -> None:
        await asyncio.sleep(0.005)  # a broker round trip
        producer.log.append(("sent", fut))

    monkeypatch.setattr(exactly_once, "_original_send_pending", sent)

    async def scenario() -> None:
        task = asyncio.create_task(producer.buffer.run())
        producer.buffer.pending.put_nowait("tombstone run-a")  # the expiry's table deletion
        await exactly_once.commit_outside_batches(
            app, [TP("lg-runs-changelog", 3), TP("lg-runs-changelog", 3)]
        )
        task.cancel()

    asyncio.run(scenario())
    # The deletion reached its producer first; only partition 3's transaction is committed,
    # once, and a new one begun for the partition's next events.
    assert producer.log == [("sent", "tombstone run-a"), ("commit", "lg-0-3"), ("begin", "lg-0-3")]


def test_a_partition_this_worker_no_longer_owns_is_left_to_its_owner() -> None:
    producer = Producer(owned=["lg-0-1"])
    asyncio.run(exactly_once.commit_outside_batches(app_with(producer), [TP("lg.events", 4)]))
    assert producer.log == []


def test_at_least_once_there_is_no_transaction_to_commit() -> None:
    producer = Producer(owned=["lg-0-1"])
    app = app_with(producer, in_transaction=False)
    asyncio.run(exactly_once.commit_outside_batches(app, [TP("lg.events", 1)]))
    assert producer.log == []


def test_a_fenced_producer_crashes_the_worker_and_a_failed_commit_is_left_for_the_next() -> None:
    producer = Producer(owned=["lg-0-1", "lg-0-2", "lg-0-3"])
    log = producer.log
    producer._transaction_producers["lg-0-1"] = Transaction("lg-0-1", log, ProducerFenced())
    producer._transaction_producers["lg-0-2"] = Transaction("lg-0-2", log, KafkaTimeoutError())
    app = app_with(producer)
    tps = [TP("lg.events", n) for n in (1, 2, 3)]
    asyncio.run(exactly_once.commit_outside_batches(app, tps))
    assert [type(exc) for exc in app.crashed] == [ProducerFenced]
    assert log == [("commit", "lg-0-3"), ("begin", "lg-0-3")]  # the others did not stop it


# -- the agent's commit after each batch ------------------------------------------------------


class CommittingConsumer:
    """Faust's Consumer.commit and maybe_wait_for_commit_to_finish (its own: one commit at a
    time, a caller arriving during one waits for it and commits nothing), over a commit that
    takes the acks present when it starts and finishes when the test lets it."""

    commit = faust_consumer.Consumer.commit
    maybe_wait_for_commit_to_finish = faust_consumer.Consumer.maybe_wait_for_commit_to_finish

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.app = SimpleNamespace(client_only=False)
        self._commit_fut: asyncio.Future | None = None
        self.acked: list[int] = []
        self.committed: list[list[int]] = []
        self.started = asyncio.Event()
        self.finish = asyncio.Event()
        self.finish.set()

    async def force_commit(self, topics: Any = None, start_new_transaction: bool = True) -> bool:
        offsets, self.acked = self.acked, []  # Faust reads the acks when the commit starts
        self.started.set()
        await self.finish.wait()
        self.committed.append(offsets)
        return bool(offsets)


def test_a_batch_is_committed_at_once_when_no_commit_is_under_way() -> None:
    async def scenario() -> CommittingConsumer:
        consumer = CommittingConsumer()
        consumer.acked = [7, 8]  # the agent acked its batch
        assert await exactly_once.commit_batch(consumer)
        return consumer

    assert asyncio.run(scenario()).committed == [[7, 8]]


def test_a_commit_under_way_is_waited_out_and_one_more_carries_the_batch() -> None:
    async def scenario() -> CommittingConsumer:
        consumer = CommittingConsumer()
        consumer.finish.clear()
        timer = asyncio.create_task(consumer.commit())  # Faust's timer: no acks yet
        await consumer.started.wait()
        consumer.acked = [7]  # the batch's acks, after the timer's commit read them
        batch = asyncio.create_task(exactly_once.commit_batch(consumer))
        await asyncio.sleep(0)
        assert not batch.done()  # it does not return on the timer's commit (Faust's would)
        consumer.finish.set()
        assert await batch
        await timer
        return consumer

    assert asyncio.run(scenario()).committed == [[], [7]]


# -- the partitions' transactions, committed together -----------------------------------------


class CommittingTransaction:
    """An aiokafka transactional producer: each step a broker round trip (a loop turn)."""

    def __init__(self, tid: str, log: list[Any], fails: BaseException | None = None) -> None:
        self.tid, self.log, self.fails = tid, log, fails

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        self.log.append(("offsets", self.tid, dict(offsets), group_id))
        await asyncio.sleep(0)

    async def commit_transaction(self) -> None:
        await asyncio.sleep(0)
        if self.fails is not None:
            raise self.fails
        self.log.append(("commit", self.tid))

    async def begin_transaction(self) -> None:
        self.log.append(("begin", self.tid))


def transaction_producer(*transactions: CommittingTransaction) -> SimpleNamespace:
    return SimpleNamespace(
        _transaction_producers={t.tid: t for t in transactions},
        _trn_locks={t.tid: asyncio.Lock() for t in transactions},
    )


def test_the_partitions_transactions_are_committed_together() -> None:
    log: list[Any] = []
    producer = transaction_producer(*(CommittingTransaction(f"lg-0-{n}", log) for n in (1, 2)))
    offsets = {"lg-0-1": {"events-1": 10}, "lg-0-2": {"events-2": 20}}
    asyncio.run(exactly_once._commit_transactions_concurrently(producer, offsets, "lg"))
    # Both had their offsets in before either committed: one round of round trips, not two.
    assert log[:2] == [
        ("offsets", "lg-0-1", {"events-1": 10}, "lg"),
        ("offsets", "lg-0-2", {"events-2": 20}, "lg"),
    ]
    assert sorted(log[2:]) == [
        ("begin", "lg-0-1"),
        ("begin", "lg-0-2"),
        ("commit", "lg-0-1"),
        ("commit", "lg-0-2"),
    ]


def test_a_failed_transaction_is_raised_after_the_others_are_committed() -> None:
    log: list[Any] = []
    producer = transaction_producer(
        CommittingTransaction("lg-0-1", log, ProducerFenced()),
        CommittingTransaction("lg-0-2", log),
    )
    offsets = {"lg-0-1": {"events-1": 10}, "lg-0-2": {"events-2": 20}, "lg-0-3": {"e-3": 1}}
    with pytest.raises(ProducerFenced):  # Faust's caller crashes the worker on it
        asyncio.run(exactly_once._commit_transactions_concurrently(producer, offsets, "lg"))
    # lg-0-3 is not this worker's (no producer): skipped, as Faust does.
    assert [entry for entry in log if entry[0] != "offsets"] == [
        ("commit", "lg-0-2"),
        ("begin", "lg-0-2"),
    ]


def test_committing_without_starting_a_new_transaction_begins_none() -> None:
    log: list[Any] = []
    producer = transaction_producer(CommittingTransaction("lg-0-1", log))
    asyncio.run(
        exactly_once._commit_transactions_concurrently(
            producer, {"lg-0-1": {"events-1": 3}}, "lg", start_new_transaction=False
        )
    )
    assert log == [("offsets", "lg-0-1", {"events-1": 3}, "lg"), ("commit", "lg-0-1")]


def test_exactly_once_producers_retry_quickly_and_the_others_as_before(monkeypatch) -> None:
    """aiokafka waits retry_backoff_ms (100 ms) after CONCURRENT_TRANSACTIONS; the
    transactional producers of an exactly-once app wait 5 ms instead."""

    def faust_settings_extra(self: Any) -> dict[str, Any]:
        return {"acks": "all"}

    monkeypatch.setattr(exactly_once, "_original_settings_extra", faust_settings_extra)
    settings_extra = exactly_once._quick_transaction_retries(5)
    transactional = SimpleNamespace(app=SimpleNamespace(in_transaction=True))
    plain = SimpleNamespace(app=SimpleNamespace(in_transaction=False))
    assert settings_extra(transactional) == {"acks": "all", "retry_backoff_ms": 5}
    assert settings_extra(plain) == {"acks": "all"}
