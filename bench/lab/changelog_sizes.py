"""The ``runs`` table's size over time, rebuilt from its changelog topic (the worker writes a
tombstone per expired run): does memory follow the live runs?"""

from __future__ import annotations

import time

from kafka import KafkaConsumer, TopicPartition


def table_sizes(
    bootstrap: str, topic: str, marks: dict[str, float], idle_ttl: float
) -> dict[str, int]:
    """Live keys of the ``runs`` table at wall-clock ``marks`` (epoch s), plus the peak.

    Rebuilt from the changelog: a key is live from a record with a value until a tombstone.
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_bytes=64 * 1_048_576,
        max_partition_fetch_bytes=16 * 1_048_576,
    )
    records: list[tuple[int, bytes, bool]] = []
    volume = 0
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and any(
            consumer.position(tp) < ends[tp] for tp in partitions
        ):
            for batch in consumer.poll(timeout_ms=500, max_records=50_000).values():
                records.extend((r.timestamp, r.key, r.value is None) for r in batch)
                volume += sum(len(r.value or b"") for r in batch)
    finally:
        consumer.close()
    records.sort(key=lambda r: r[0])
    live: set[bytes] = set()
    dropped: set[bytes] = set()
    recreated: set[bytes] = set()
    last_write: dict[bytes, int] = {}
    long_gaps: set[bytes] = set()  # runs whose state went > idle_ttl without a write
    sizes: dict[str, int] = {}
    pending = sorted(marks.items(), key=lambda kv: kv[1])
    peak = 0
    for timestamp, key, tombstone in records:
        while pending and timestamp > pending[0][1] * 1000:
            sizes[pending.pop(0)[0]] = len(live)
        if tombstone:
            live.discard(key)
            dropped.add(key)
        else:
            live.add(key)
            if key in dropped:
                recreated.add(key)
            if timestamp - last_write.get(key, timestamp) > idle_ttl * 1000:
                long_gaps.add(key)
            last_write[key] = timestamp
        peak = max(peak, len(live))
    for name, _ in pending:
        sizes[name] = len(live)
    sizes["peak"] = peak
    sizes["records"] = len(records)
    sizes["tombstones"] = sum(1 for r in records if r[2])
    sizes["recreated"] = len(recreated)  # state written again after its run was expired
    sizes["long_gaps"] = len(long_gaps)
    sizes["bytes"] = volume
    return sizes
