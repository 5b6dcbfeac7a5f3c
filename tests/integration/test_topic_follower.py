"""The control-topic follower every gateway runs (:class:`streams.kafka.reader.TopicFollower`):
stopped and started again, as after a reconnect, it goes on from the records it had reached in
every partition, those that had none yet included."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from kafka import KafkaProducer
from services import Pipeline

from streams.kafka.reader import TopicFollower

pytestmark = pytest.mark.integration


def wait_for(got: list[bytes], count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_follower_from_the_end_reopened_misses_nothing_published_meanwhile(
    broker, tmp_path: Path
) -> None:
    pipeline = Pipeline(broker, f"sqlite:///{tmp_path / 'audit.db'}", tmp_path).setup()
    topic, partitions = pipeline.settings.topics.control, pipeline.partitions
    got: list[bytes] = []
    follower = TopicFollower(
        broker.bootstrap, topic, lambda record: got.append(record.value), from_end=True
    )
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        producer.send(topic, b"before the follower", partition=0).get(timeout=30)
        assert follower.open(wait=30)
        follower.start()
        producer.send(topic, b"first", partition=0).get(timeout=30)
        wait_for(got, 1)
        assert got == [b"first"]

        follower.stop()  # its consumer closed, as after an error
        assert follower.reached == {0: 2, **{p: 0 for p in range(1, partitions)}}
        meanwhile = [f"meanwhile {p}".encode() for p in range(partitions)]
        for p, value in enumerate(meanwhile):
            producer.send(topic, value, partition=p).get(timeout=30)
        follower.start()
        wait_for(got, 1 + partitions)
        assert Counter(got) == Counter([b"first", *meanwhile])
        assert follower.reached == {0: 3, **{p: 1 for p in range(1, partitions)}}
    finally:
        follower.stop()
        producer.close()


@pytest.mark.broker("kafka")
def test_committed_transactions_leave_no_partition_looking_stuck(broker, tmp_path: Path) -> None:
    """Read committed, each transaction ends in a marker past its last record: a follower at
    the end of every partition must not take that for a stall and reconnect."""
    pipeline = Pipeline(broker, f"sqlite:///{tmp_path / 'audit.db'}", tmp_path).setup()
    topic, partitions = pipeline.settings.topics.control, pipeline.partitions
    got: list[bytes] = []
    follower = TopicFollower(
        broker.bootstrap,
        topic,
        lambda record: got.append(record.value),
        from_end=True,
        stall_seconds=0.2,
        isolation_level="read_committed",
    )
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id=f"{pipeline.prefix}-writer"
    )
    try:
        producer.init_transactions()
        assert follower.open(wait=30)
        follower.start()
        for p in range(partitions):
            producer.begin_transaction()
            producer.send(topic, f"committed {p}".encode(), partition=p)
            producer.commit_transaction()
        wait_for(got, partitions)
        assert sorted(got) == [f"committed {p}".encode() for p in range(partitions)]
        looked = follower.stall_watch.looks
        deadline = time.monotonic() + 30
        while follower.stall_watch.looks < looked + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert follower.stall_watch.looks >= looked + 3
        assert follower.reconnects == 0
    finally:
        follower.stop()
        producer.close()
