"""BatchSends: each partition's records in order, all partitions at once, straight to the
producer, in the source partition's transaction."""

from __future__ import annotations

import asyncio
from collections import namedtuple

from streams.worker.batch_sends import BatchSends

TP = namedtuple("TP", "topic partition")


class GatedProducer:
    """Faust's producer whose send to a partition waits until that partition's gate opens,
    as aiokafka's send waits while the partition's batch is full (one record per batch)."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.log: list[tuple[str, int, bytes, bytes, str | None]] = []
        self.gates: dict[tuple[str, int], asyncio.Event] = {}
        self.fail = fail

    def gate(self, topic: str, partition: int) -> asyncio.Event:
        return self.gates.setdefault((topic, partition), asyncio.Event())

    async def send(self, topic, key, value, partition, timestamp, headers, *, transactional_id):
        await self.gate(topic, partition).wait()
        self.log.append((topic, partition, key, value, transactional_id))
        delivered = asyncio.get_running_loop().create_future()
        if self.fail is None:
            delivered.set_result(None)
        else:
            delivered.set_exception(self.fail)
        return delivered


def by_last_byte(topic: str, key: bytes) -> TP:
    return TP(topic, key[-1] % 2)


def in_transaction_of(source: TP) -> str:
    return f"txn-{source.partition}"


def make(producer: GatedProducer, errors: list[BaseException] | None = None) -> BatchSends:
    return BatchSends(
        producer, by_last_byte, in_transaction_of, (errors if errors is not None else []).append
    )


def test_records_keep_their_order_per_partition_and_partitions_do_not_wait_for_each_other():
    async def scenario() -> GatedProducer:
        producer = GatedProducer()
        sends = make(producer)
        sends.add("control", b"run-0", b"decision 1")
        sends.add("control", b"run-1", b"decision 2", source=TP("events", 3))
        sends.add("changelog", b"run-0", b"state", partition=1)  # the table's routing wins
        sends.add("control", b"run-0", b"watermark")
        assert len(sends) == 4
        flushing = asyncio.ensure_future(sends.flush())
        for topic, partition in (("control", 1), ("changelog", 1), ("control", 0)):
            producer.gate(topic, partition).set()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await asyncio.wait_for(flushing, 5)
        assert len(sends) == 0
        return producer

    producer = asyncio.run(scenario())
    # Partition 1 of control went first although its record was queued second: the chain of
    # control partition 0 was blocked and did not hold the others back.
    assert producer.log == [
        ("control", 1, b"run-1", b"decision 2", "txn-3"),
        ("changelog", 1, b"run-0", b"state", None),
        ("control", 0, b"run-0", b"decision 1", None),
        ("control", 0, b"run-0", b"watermark", None),
    ]


def test_a_send_the_producer_refuses_fails_the_flush():
    class Closed(GatedProducer):
        async def send(self, *args, **kwargs):
            raise RuntimeError("producer closed")

    async def scenario() -> None:
        sends = make(Closed())
        sends.add("control", b"run-0", b"decision")
        await sends.flush()

    try:
        asyncio.run(scenario())
    except RuntimeError as exc:
        assert "producer closed" in str(exc)
    else:
        raise AssertionError("a refused send must reach the agent (it crashes the worker)")


def test_a_record_the_producer_gives_up_on_is_reported():
    async def scenario() -> list[BaseException]:
        producer = GatedProducer(fail=TimeoutError("delivery timed out"))
        producer.gate("control", 0).set()
        errors: list[BaseException] = []
        sends = make(producer, errors)
        sends.add("control", b"run-0", b"decision")
        await sends.flush()
        await asyncio.sleep(0)  # done callbacks run on the next turn
        return errors

    (error,) = asyncio.run(scenario())
    assert isinstance(error, TimeoutError)
