"""true_end_offsets: a partition's end as its records say, past tansu's reported end offset.

tansu reports the end offset of a partition as its last batch's first offset + 1; Faust's
table recovery stopped there, so the tansu profile produced one record per batch. With the
recovery's targets from true_end_offsets the worker can batch (streams/worker/faust_patches.py,
read_changelogs_to_their_end). On Kafka the reported end is exact and stays as it is.
"""

from __future__ import annotations

import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from streams.kafka.topics import create_like, ensure_topics
from streams.kafka.true_end import true_end_offsets
from streams.settings import Settings, Topics


def test_the_end_of_a_partition_written_in_one_batch_is_its_last_record_plus_one(broker) -> None:
    prefix = f"te{uuid.uuid4().hex[:8]}"
    settings = Settings.for_profile(
        broker.profile, broker=broker.url, partitions=1, topics=Topics.with_prefix(prefix)
    )
    ensure_topics(settings)
    topic = f"{prefix}.batched"
    create_like(settings, topic, settings.topics.events)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=200, acks="all")
    futures = [producer.send(topic, key=b"k", value=b"v%d" % n, partition=0) for n in range(5)]
    producer.flush()
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    reported = consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    consumer.close()
    ends = true_end_offsets(settings, {(topic, 0): reported, (topic, 1): 0})
    assert ends[(topic, 0)] == max(offsets) + 1 == 5
    assert ends[(topic, 1)] == 0  # an empty (or absent) partition is left as it is
    if broker.profile == "kafka":
        assert reported == 5  # Kafka's end offset is exact: nothing to raise
