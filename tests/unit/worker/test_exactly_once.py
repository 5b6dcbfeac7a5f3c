"""The exactly-once commit patches of streams/worker/exactly_once.py, on stand-ins for Faust's.

End to end: tests/integration/test_reliability.py and test_kafka_failover.py on Apache Kafka
with LOOPGUARD_PROCESSING_GUARANTEE=exactly_once (zero decisions twice, read committed).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

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
    def __init__(self, in_transaction: bool, buffer: Buffer) -> None:
        self.in_transaction = in_transaction
        self.app = SimpleNamespace(producer=SimpleNamespace(buffer=buffer))


def commit_recorder(monkeypatch, log: list[Any]) -> None:
    async def commit(consumer: Consumer, offsets: dict, start_new_transaction: bool) -> bool:
        log.append(("commit", dict(offsets), list(consumer.app.producer.buffer.sent)))
        return True

    monkeypatch.setattr(exactly_once, "_original_commit_offsets", commit)


def test_an_exactly_once_commit_waits_for_the_batch_and_takes_its_buffered_writes(
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
        async with barrier:  # the agent is in the middle of a batch
            commit = asyncio.create_task(
                exactly_once._commit_offsets_between_batches(consumer, {"tp": 7})
            )
            await asyncio.sleep(0.02)
            assert not commit.done() and log == []  # never splits a batch
            buffer.pending.put_nowait("run-1 state")  # the batch's table write, at its end
            log.append("batch done")
        assert await commit
        task.cancel()

    asyncio.run(scenario())
    assert log == ["batch done", ("commit", {"tp": 7}, ["run-1 state"])]


def test_at_least_once_commits_pass_straight_through(monkeypatch) -> None:
    log: list[Any] = []
    commit_recorder(monkeypatch, log)

    async def scenario() -> None:
        barrier = asyncio.Lock()
        monkeypatch.setattr(exactly_once, "_barrier", barrier)
        async with barrier:
            assert await exactly_once._commit_offsets_between_batches(
                Consumer(False, Buffer()), {"tp": 3}
            )

    asyncio.run(scenario())
    assert log == [("commit", {"tp": 3}, [])]


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
