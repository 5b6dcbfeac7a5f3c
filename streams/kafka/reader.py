"""Read a topic without a consumer group: a bounded slice (:class:`TopicReader`: replay, export,
``config show``, the schemas topic) or a follower that never ends (:class:`TopicFollower`: the
config topic in every worker, the control topic in every gateway).

Every partition is assigned directly (no group join, nothing committed, no effect on the
workers' offsets). A slice starts at the beginning, at ``--from-offset`` or at the first
record not older than ``--since`` (``offsets_for_times``), and ends at the end offsets taken
when the reader starts, so a replay of a live topic terminates and can be read again with
the same bounds (:meth:`TopicReader.records` re-seeks on every call).

Some brokers report a high watermark that lags behind the last record batch (the tansu broker
returns the last batch's *base* offset + 1); records past the reported end that were written
before the reader started are therefore still part of the slice, and a partition ends at the
first record written after the start, or when it has nothing more to give.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from streams.kafka.stall_watch import StallWatch
from streams.kafka.topics import all_partitions

log = logging.getLogger("loopguard.reader")

# ``offsets_for_times`` looks at broker/producer record timestamps while selections filter on
# the gateway's event time; seek this much earlier so clock skew cannot cut events off.
SINCE_SEEK_MARGIN_MS = 60_000


class ReaderError(RuntimeError):
    """The topic cannot be read as asked (missing topic, unreachable broker)."""


class TopicNotFoundError(ReaderError):
    """The topic does not exist (yet)."""


def group_less_consumer(bootstrap_servers: str | list[str], **options: Any) -> KafkaConsumer:
    """A consumer that joins no group and commits nothing: its reads touch no one's offsets."""
    return KafkaConsumer(
        bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False, **options
    )


@dataclass
class PartitionSlice:
    partition: int
    start: int
    end: int  # end offset reported when the reader started (exclusive)
    stopped_at: int | None = None  # position where reading stopped
    note: str = ""


@dataclass
class TopicReader:
    bootstrap_servers: list[str]
    topic: str
    kafka_options: dict[str, Any] = field(default_factory=dict)
    from_offsets: dict[int | None, int] = field(default_factory=dict)  # None: every partition
    since_ms: int | None = None
    poll_ms: int = 1000
    stall_seconds: float = 15.0
    slices: dict[int, PartitionSlice] = field(default_factory=dict)
    snapshot_ms: int = 0
    _consumer: KafkaConsumer | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def open(self) -> TopicReader:
        """Connect, assign every partition and fix the slice's start and end offsets."""
        try:
            consumer = group_less_consumer(self.bootstrap_servers, **self.kafka_options)
        except KafkaError as exc:
            raise ReaderError(
                f"cannot connect to broker {','.join(self.bootstrap_servers)}: {exc} "
                "(check --broker / LOOPGUARD_BROKER and that Kafka is running there)"
            ) from None
        self._consumer = consumer
        tps = all_partitions(consumer, self.topic)
        partitions = {tp.partition for tp in tps}
        if not partitions:
            self.close()
            raise TopicNotFoundError(f"topic {self.topic!r} not found (is --topic-prefix right?)")
        unknown = [p for p in self.from_offsets if p is not None and p not in partitions]
        if unknown:
            self.close()
            raise ReaderError(
                f"--from-offset names partition {unknown[0]}, but {self.topic!r} has "
                f"partitions 0..{max(partitions)}"
            )
        consumer.assign(tps)
        self.snapshot_ms = int(time.time() * 1000)
        begin = consumer.beginning_offsets(tps)
        end = consumer.end_offsets(tps)
        since = self._since_offsets(tps, end)
        for tp in tps:
            start = begin[tp]
            wanted = self.from_offsets.get(tp.partition, self.from_offsets.get(None))
            if wanted is not None:
                start = max(start, wanted)
            if since is not None:
                start = max(start, since[tp])
            self.slices[tp.partition] = PartitionSlice(tp.partition, start, end[tp])
        return self

    def _since_offsets(
        self, tps: list[TopicPartition], end: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int] | None:
        if self.since_ms is None:
            return None
        assert self._consumer is not None
        target = max(self.since_ms - SINCE_SEEK_MARGIN_MS, 0)
        try:
            found = self._consumer.offsets_for_times({tp: target for tp in tps})
        except KafkaError as exc:  # old brokers: scan from the start, the filter still applies
            log.warning("offsets_for_times unsupported (%s); reading from the beginning", exc)
            return None
        # None: no record at or after the time, so the partition's slice is empty.
        return {tp: end[tp] if found.get(tp) is None else found[tp].offset for tp in tps}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def __enter__(self) -> TopicReader:
        return self.open()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------------------

    @property
    def total(self) -> int:
        """Records in the slice as reported by the broker (for progress percentages)."""
        return sum(max(s.end - s.start, 0) for s in self.slices.values())

    def position(self) -> dict[int, int]:
        assert self._consumer is not None
        return {
            p: self._consumer.position(TopicPartition(self.topic, p)) for p in sorted(self.slices)
        }

    def records(self) -> Iterator[Any]:
        """The slice's records (kafka-python ``ConsumerRecord``), partitions interleaved."""
        consumer = self._consumer
        if consumer is None:
            raise ReaderError("reader is not open")
        tps = {p: TopicPartition(self.topic, p) for p in self.slices}
        consumer.resume(*tps.values())
        for p, tp in tps.items():
            consumer.seek(tp, self.slices[p].start)
            self.slices[p].stopped_at = None
            self.slices[p].note = ""
        active = set(tps)
        idle_since: float | None = None

        def finish(p: int, note: str = "") -> None:
            active.discard(p)
            consumer.pause(tps[p])
            self.slices[p].stopped_at = consumer.position(tps[p])
            self.slices[p].note = note

        while active:
            batch = consumer.poll(timeout_ms=self.poll_ms)
            for tp, records in batch.items():
                p = tp.partition
                if p not in active:
                    continue
                for record in records:
                    past_end = record.offset >= self.slices[p].end
                    if past_end and record.timestamp > self.snapshot_ms:
                        finish(p)
                        break
                    yield record
            if any(batch.values()):
                idle_since = None
                continue
            # Nothing new: partitions at (or past) their end offset are done.
            for p in sorted(active):
                if consumer.position(tps[p]) >= self.slices[p].end:
                    finish(p)
            if not active:
                break
            now = time.monotonic()
            idle_since = idle_since or now
            if now - idle_since > self.stall_seconds:
                for p in sorted(active):
                    position = consumer.position(tps[p])
                    log.warning(
                        "%s[%d]: no records past offset %d (end offset was %d); stopping",
                        self.topic,
                        p,
                        position,
                        self.slices[p].end,
                    )
                    finish(p, f"stalled at offset {position} before end {self.slices[p].end}")


class TopicFollower:
    """Follow every partition of a topic on a background thread, handing each record to
    ``on_record``: from the beginning (the whole state of a compacted topic) or from the end
    (only what comes next).

    A topic that does not exist yet is waited for; after an error (a broker restart) the
    follower reconnects and goes on from the records it had reached, so nothing is handed over
    twice or skipped. So it does when a partition stays behind its end offset while nothing
    comes (:class:`~streams.kafka.stall_watch.StallWatch`, counted in :attr:`reconnects`).
    An exception from ``on_record`` is logged and the next record follows.
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        topic: str,
        on_record: Callable[[Any], None],
        *,
        from_end: bool = False,
        poll_ms: int = 200,
        retry_seconds: float = 1.0,
        stall_seconds: float = 5.0,
        thread_name: str = "loopguard-follow",
        **consumer_options: Any,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.on_record = on_record
        self.from_end = from_end
        self.poll_ms = poll_ms
        self.retry_seconds = retry_seconds
        self.thread_name = thread_name
        self.stall_watch = StallWatch(stall_seconds, time.monotonic())
        self.reconnects = 0  # after a partition was found stuck behind its end offset
        self._options = consumer_options
        self._consumer: KafkaConsumer | None = None
        self._next: dict[int, int] = {}  # partition -> offset of the next record to hand over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self, wait: float = 0.0) -> bool:
        """Connect and assign every partition now, waiting up to ``wait`` seconds for the
        topic; False when it is not there. From the end, the end offsets are fixed before this
        returns, so every record published afterwards is handed over."""
        consumer = group_less_consumer(self.bootstrap_servers, **self._options)
        assigned = all_partitions(consumer, self.topic, wait=wait)
        if not assigned:
            consumer.close()
            return False
        consumer.assign(assigned)
        fresh = [tp for tp in assigned if tp.partition not in self._next]
        for tp in assigned:
            if tp.partition in self._next:
                consumer.seek(tp, self._next[tp.partition])
        if fresh and self.from_end:
            consumer.seek_to_end(*fresh)
            for tp in fresh:
                # Resolved now, not at the first poll, and kept: a reconnect must go on from
                # here, not from the end again, in a partition that had no record yet.
                end = consumer.position(tp)
                if end is not None:
                    self._next[tp.partition] = end
        elif fresh:
            consumer.seek_to_beginning(*fresh)
        self._consumer = consumer
        return True

    @property
    def reached(self) -> dict[int, int]:
        """Per partition, the offset of the next record to hand over (transaction markers
        aside): where a follower that fell behind stands."""
        return dict(self._next)

    def start(self) -> TopicFollower:
        """Follow on a background thread (opening first, if :meth:`open` was not called);
        after :meth:`stop`, from the records it had reached."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        self._close()

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _run(self) -> None:
        watch = self.stall_watch
        watch.progressed(time.monotonic())  # (re)started: the first look after a quiet spell
        while not self._stop.is_set():
            try:
                if self._consumer is None and not self.open():
                    self._stop.wait(self.retry_seconds)
                    continue
                assert self._consumer is not None
                batches = self._consumer.poll(timeout_ms=self.poll_ms)
                if any(batches.values()):
                    watch.progressed(time.monotonic())
                elif watch.due(time.monotonic()):
                    self._reconnect_if_stuck()
                    continue
            except Exception as exc:  # broker restarts: reconnect, go on where it was
                log.warning("%s: reconnecting after: %s", self.topic, exc)
                self._close()
                self._stop.wait(self.retry_seconds)
                continue
            for records in batches.values():
                for record in records:
                    self._next[record.partition] = record.offset + 1
                    try:
                        self.on_record(record)
                    except Exception:
                        log.exception(
                            "%s: error handling the record at offset %d", self.topic, record.offset
                        )
        self._close()

    def _reconnect_if_stuck(self) -> None:
        """Nothing came for a while: reconnect if a partition is behind its end offset at the
        same position as at the last look (its fetches stopped, not its records)."""
        assert self._consumer is not None
        tps = sorted(self._consumer.assignment())
        ends = {tp.partition: end for tp, end in self._consumer.end_offsets(tps).items()}
        positions: dict[int, int] = {}
        for tp in tps:
            position = self._consumer.position(tp)
            if position is not None:
                positions[tp.partition] = position
        stuck = self.stall_watch.stuck(positions, ends, time.monotonic())
        if stuck:
            log.warning(
                "%s: partitions %s stay behind their end offsets (at %s of %s) with nothing "
                "fetched for %.0f s; reconnecting",
                self.topic,
                stuck,
                [positions[p] for p in stuck],
                [ends[p] for p in stuck],
                self.stall_watch.seconds,
            )
            self.reconnects += 1
            self._close()
