"""BatchSends: each partition's records in order, all partitions at once, straight to the
producer, in the source partition's transaction."""

from __future__ import annotations

import asyncio

from streams.service.records import OutRecord
from streams.worker.batch_sends import BatchSends


class Builder:
    """aiokafka's BatchBuilder: takes records until it holds ``size`` (then append says None)."""

    def __init__(self, size: int) -> None:
        self.size, self.records, self.headers = size, [], []

    def append(self, *, key, value, timestamp, headers=()):
        if len(self.records) >= self.size:
            return None
        self.records.append((key, value))
        self.headers.append(list(headers))  # a control record's signature (issue 40)
        return True


class KafkaProducer:
    """One aiokafka producer (a transaction's, or the plain one: tid None)."""

    def __init__(self, owner: GatedProducer, tid: str | None) -> None:
        self.owner, self.tid = owner, tid

    def create_batch(self) -> Builder:
        return Builder(self.owner.batch_records)

    async def send_batch(self, batch: Builder, topic: str, *, partition: int):
        owner = self.owner
        if owner.refuse is not None:
            raise owner.refuse
        await owner.gate(topic, partition).wait()
        owner.batches.append(len(batch.records))
        for key, value in batch.records:
            owner.log.append((topic, partition, key, value, self.tid))
        delivered = asyncio.get_running_loop().create_future()
        if owner.fail is None:
            delivered.set_result(None)
        else:
            delivered.set_exception(owner.fail)
        return delivered


class GatedProducer:
    """Faust's producer, whose aiokafka producers' batch sends to a partition wait until
    that partition's gate opens, as aiokafka waits while the partition's batch is pending."""

    def __init__(
        self,
        fail: Exception | None = None,
        refuse: Exception | None = None,
        batch_records: int = 100,
    ) -> None:
        self.log: list[tuple[str, int, bytes, bytes, str | None]] = []
        self.batches: list[int] = []  # records per batch handed over
        self.gates: dict[tuple[str, int], asyncio.Event] = {}
        self.fail, self.refuse, self.batch_records = fail, refuse, batch_records
        self._transaction_producers = {f"txn-{n}": KafkaProducer(self, f"txn-{n}") for n in (1, 3)}
        self._trn_locks = {tid: asyncio.Lock() for tid in self._transaction_producers}
        self.plain = KafkaProducer(self, None)

    def _ensure_producer(self) -> KafkaProducer:
        return self.plain

    def gate(self, topic: str, partition: int) -> asyncio.Event:
        return self.gates.setdefault((topic, partition), asyncio.Event())


def in_transaction_of(source: tuple[str, int]) -> str | None:
    return f"txn-{source[1]}" if source[1] else None  # events partition 0: no transaction


def make(producer: GatedProducer, errors: list[BaseException] | None = None) -> BatchSends:
    return BatchSends(producer, in_transaction_of, (errors if errors is not None else []).append)


def records(*rows: tuple[str, bytes, bytes, int, int]) -> dict:
    """(topic, key, value, partition, source events partition) rows, grouped as
    process_batch groups them: per destination partition, in order."""
    grouped: dict = {}
    for topic, key, value, partition, source in rows:
        record = OutRecord(topic, key, value, partition, ("events", source))
        grouped.setdefault((topic, partition), []).append(record)
    return grouped


def test_records_keep_their_order_per_partition_and_partitions_do_not_wait_for_each_other():
    async def scenario() -> GatedProducer:
        producer = GatedProducer()
        sends = make(producer)
        batch = records(
            ("control", b"run-0", b"decision 1", 0, 0),
            ("control", b"run-1", b"decision 2", 1, 3),
            ("changelog", b"run-0", b"state", 1, 0),
            ("control", b"run-0", b"watermark", 0, 0),
        )
        flushing = asyncio.ensure_future(sends.send(batch))
        for topic, partition in (("control", 1), ("changelog", 1), ("control", 0)):
            producer.gate(topic, partition).set()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await asyncio.wait_for(flushing, 5)
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
    async def scenario() -> None:
        sends = make(GatedProducer(refuse=RuntimeError("producer closed")))
        await sends.send(records(("control", b"run-0", b"decision", 0, 0)))

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
        await sends.send(records(("control", b"run-0", b"decision", 0, 0)))
        await asyncio.sleep(0)  # done callbacks run on the next turn
        return errors

    (error,) = asyncio.run(scenario())
    assert isinstance(error, TimeoutError)


def test_records_go_in_whole_batches_of_the_producers_size_in_order():
    async def scenario() -> GatedProducer:
        producer = GatedProducer(batch_records=2)
        producer.gate("changelog", 1).set()
        rows = [("changelog", b"run-%d" % n, b"state %d" % n, 1, 0) for n in range(5)]
        await make(producer).send(records(*rows))
        return producer

    producer = asyncio.run(scenario())
    assert producer.batches == [2, 2, 1]  # a full batch is handed over, the next one begun
    assert [value for _, _, _, value, _ in producer.log] == [b"state %d" % n for n in range(5)]
