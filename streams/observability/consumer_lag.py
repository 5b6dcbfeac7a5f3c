"""How far a Faust consumer is behind on a topic, per partition: the end offset minus the
next offset it will read (the last read offset + 1, or the committed offset before anything
was read). ``loopguard_consumer_lag`` and /healthz's audit backlog both count it this way."""

from __future__ import annotations

from typing import Any


def assigned_partitions(consumer: Any, topic: str) -> list[Any]:
    """The consumer's assigned topic-partitions of ``topic``."""
    return [tp for tp in consumer.assignment() if tp.topic == topic]


def partition_lags(consumer: Any, assigned: list[Any]) -> dict[int, int]:
    """Partition -> records not read yet (>= 0), for those of ``assigned`` whose end offset
    and position are known (a partition not fetched yet, or restarting, is left out)."""
    read = getattr(consumer, "_read_offset", {})
    committed = getattr(consumer, "_committed_offset", {})
    lags: dict[int, int] = {}
    for tp in assigned:
        try:
            end = consumer.highwater(tp)
        except Exception:  # noqa: BLE001 - not fetched yet / consumer restarting
            continue
        last_read = read.get(tp)
        position = last_read + 1 if last_read is not None else committed.get(tp)
        if end is not None and position is not None:
            lags[tp.partition] = max(0, end - position)
    return lags


def unread_records(consumer: Any, topic: str) -> int:
    """Records on ``topic``'s partitions assigned to ``consumer`` (a Faust consumer) that it
    has not read yet; /healthz reports the control topic's as the audit agent's backlog
    (issue 26). 0 while the consumer is not started or restarting."""
    try:
        assigned = assigned_partitions(consumer, topic)
    except Exception:  # noqa: BLE001 - consumer not started / restarting
        return 0
    return sum(partition_lags(consumer, assigned).values())
