"""A partition's end offset as its records say, not as the broker reports it.

tansu reports a partition's end offset as the *first* offset of its last record batch + 1
(docs/design.md, "tansu, the embedded broker"), so a reader that stops at the reported end
misses the rest of that batch. Faust's table recovery is such a reader; to let the worker
batch its producer records on tansu (one record per batch capped its throughput) the
recovery's targets come from :func:`true_end_offsets` instead: read from the reported end - 1
(the last batch's first record) and take the last offset the fetch returns. On a broker
that reports exact end offsets this reads one record per partition and returns the same
offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from kafka import TopicPartition
from kafka.errors import KafkaError

from streams.kafka.reader import group_less_consumer
from streams.settings import Settings

log = logging.getLogger("loopguard.kafka")

# (topic, partition) -> offset
Offsets = Mapping[tuple[str, int], int]


def true_end_offsets(settings: Settings, reported: Offsets, timeout: float = 10.0) -> dict:
    """``reported`` end offsets raised to one past the last record of each partition's last
    batch. A partition whose last batch cannot be read within ``timeout`` keeps its
    reported end (recovery then stops where it did before)."""
    ends = dict(reported)
    wanted = {TopicPartition(t, p): end for (t, p), end in reported.items() if end > 0}
    if not wanted:
        return ends
    try:
        consumer = group_less_consumer(
            settings.bootstrap_servers,
            auto_offset_reset="earliest",
            # A fetch holds whole batches and one poll hands over all it fetched: the last
            # batch's records arrive together.
            max_partition_fetch_bytes=max(settings.max_message_bytes, settings.producer_max_batch)
            * 4,
            max_poll_records=1_000_000,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            **settings.kafka_client_options(),
        )
    except KafkaError as exc:
        log.warning("end offsets left as reported (%r)", exc)
        return ends
    try:
        consumer.assign(list(wanted))
        for tp, end in wanted.items():
            consumer.seek(tp, end - 1)
        pending = set(wanted)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                if tp in pending and records:
                    key = (tp.topic, tp.partition)
                    ends[key] = max(ends[key], records[-1].offset + 1)
                    pending.discard(tp)
                    consumer.pause(tp)
        if pending:
            log.warning("end offsets left as reported for %s (no records read)", sorted(pending))
    except KafkaError as exc:
        log.warning("end offsets left as reported (%r)", exc)
    finally:
        consumer.close()
    return ends
