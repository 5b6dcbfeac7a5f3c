"""BatchSends: each partition's records in order, all partitions at once."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from typing import Any

from streams.worker.batch_sends import BatchSends

TP = namedtuple("TP", "topic partition")


class GatedTopic:
    """A topic whose send to a partition waits until that partition's gate opens, as
    aiokafka's send waits while the partition's batch is full (one record per batch)."""

    def __init__(self, name: str, log: list[tuple[str, int, bytes, Any]]) -> None:
        self.name = name
        self.log = log
        self.gates: dict[int, asyncio.Event] = {}

    def get_topic_name(self) -> str:
        return self.name

    async def send(self, *, key: bytes, value: Any, partition: int) -> None:
        await self.gates.setdefault(partition, asyncio.Event()).wait()
        self.log.append((self.name, partition, key, value))


def by_last_byte(topic: str, key: bytes) -> TP:
    return TP(topic, key[-1] % 2)


def test_records_keep_their_order_per_partition_and_partitions_do_not_wait_for_each_other():
    async def scenario() -> list[tuple[str, int, bytes, Any]]:
        log: list[tuple[str, int, bytes, Any]] = []
        control, changelog = GatedTopic("control", log), GatedTopic("changelog", log)
        sends = BatchSends(by_last_byte)
        sends.add(control, b"run-0", "decision 1")
        sends.add(control, b"run-1", "decision 2")
        sends.add(changelog, b"run-0", "state", partition=1)  # the table's routing wins
        sends.add(control, b"run-0", "watermark")
        assert len(sends) == 4
        flushing = asyncio.ensure_future(sends.flush())
        for gate in ((control, 1), (changelog, 1), (control, 0)):
            topic, partition = gate
            topic.gates.setdefault(partition, asyncio.Event()).set()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await asyncio.wait_for(flushing, 5)
        assert len(sends) == 0
        return log

    log = asyncio.run(scenario())
    # Partition 1 of control went first although its record was queued second: the chain of
    # control partition 0 was blocked and did not hold the others back.
    assert log == [
        ("control", 1, b"run-1", "decision 2"),
        ("changelog", 1, b"run-0", "state"),
        ("control", 0, b"run-0", "decision 1"),
        ("control", 0, b"run-0", "watermark"),
    ]


def test_a_failed_send_fails_the_flush():
    class Broken:
        def get_topic_name(self) -> str:
            return "control"

        async def send(self, *, key: bytes, value: Any, partition: int) -> None:
            raise RuntimeError("producer closed")

    async def scenario() -> None:
        sends = BatchSends(by_last_byte)
        sends.add(Broken(), b"run-0", "decision")
        await sends.flush()

    try:
        asyncio.run(scenario())
    except RuntimeError as exc:
        assert "producer closed" in str(exc)
    else:
        raise AssertionError("a failed send must reach the agent (it crashes the worker)")
