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
