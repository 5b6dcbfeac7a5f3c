"""Writer schemas on a compacted topic, so a newer gateway's events decode on older workers.

A gateway publishes the Avro schema it writes with (key = fingerprint hex) before its first
event. A worker that meets a fingerprint it does not know catches up on the topic, registers
what it finds and decodes the event with Avro schema resolution; a fingerprint that is still
unknown goes to the dead-letter topic.

The lookup runs on the guard path (the agent waits for it), so its cost per bad record is
bounded: the topic is read incrementally by one long-lived group-less consumer that remembers
its offsets (a lookup reads only what was published since the last one: one ``ListOffsets``
request and, when there is something new, one short fetch), concurrent lookups share one
catch-up, and fingerprints that were not found are cached negatively (bounded LRU, retried
after ``retry_after`` seconds, so junk ids cost a dictionary look-up, and a schema published
later is still found: any later catch-up registers it, whoever asked).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from streams.kafka.reader import group_less_consumer
from streams.kafka.topics import all_partitions
from streams.wire.errors import CodecError
from streams.wire.schema_registry import SchemaRegistry

log = logging.getLogger("loopguard.schemas")

# Defaults: a fingerprint not found is not looked for again for 5 s (a catch-up for another
# fingerprint still finds it sooner); at most 10,000 such fingerprints are remembered (about
# 1 MB); one catch-up gives up after 2 s (a broker that cannot answer must not hold a partition).
RETRY_AFTER_S = 5.0
MAX_MISSED = 10_000
CATCH_UP_DEADLINE_S = 2.0
FETCH_WAIT_MS = 50
POLL_MS = 200  # one poll; records below the end offset are there, so it returns at once


def publish_schema(
    producer: KafkaProducer,
    topic: str,
    registry: SchemaRegistry,
    text: str,
    timeout: float | None = None,
) -> None:
    """Gateway side: announce the writer schema (idempotent; compaction keeps one copy).
    ``timeout``: seconds to wait for the broker's acknowledgement (kafka-python raises
    ``KafkaTimeoutError`` after it); None waits as long as it takes."""
    fingerprint = registry.register(text)
    producer.send(topic, key=fingerprint.hex().encode(), value=text.encode())
    producer.flush(timeout=timeout)


class SchemaTopic:
    """The worker's view of the schemas topic: register writer schemas on demand, cheaply.

    Thread-safe (lookups come from ``asyncio.to_thread``, several agents at once): one lock
    guards the consumer, the offsets and the negative cache.
    """

    def __init__(
        self,
        bootstrap_servers: list[str],
        topic: str,
        registry: SchemaRegistry,
        retry_after: float = RETRY_AFTER_S,
        max_missed: int = MAX_MISSED,
        catch_up_deadline: float = CATCH_UP_DEADLINE_S,
        **kafka_options: Any,
    ) -> None:
        self.topic = topic
        self.registry = registry
        self.retry_after = retry_after
        self.max_missed = max(int(max_missed), 1)
        self.catch_up_deadline = catch_up_deadline
        self.bootstrap_servers = bootstrap_servers
        self.kafka_options = {"fetch_max_wait_ms": FETCH_WAIT_MS, **kafka_options}
        self._lock = threading.Lock()
        self._missed: OrderedDict[bytes, float] = OrderedDict()  # fingerprint -> monotonic
        self._consumer: KafkaConsumer | None = None
        self._next: dict[int, int] = {}  # partition -> offset of the next record to read
        self._settled: dict[int, int] = {}  # partition -> end offset with nothing left to read
        self._unavailable_until = 0.0  # after a broker error, no catch-up until then
        self._catch_ups = 0  # catch-ups started (coalescing: a waiter reuses a later one)
        # Counters for tests and metrics: how much work lookups did.
        self.lookups = 0
        self.fetches = 0
        self.records_read = 0

    # -- lookups ---------------------------------------------------------------------------

    def resolve(self, fingerprint: bytes) -> bool:
        """Make ``fingerprint`` known if any gateway published it; False if none did."""
        if fingerprint in self.registry:
            return True
        asked_at = self._catch_ups
        with self._lock:
            self.lookups += 1
            if fingerprint in self.registry:  # a catch-up while we waited found it
                return True
            if self._catch_ups > asked_at:
                # A catch-up started after we asked has read everything published before the
                # event we hold: its answer is ours, no need to fetch again.
                return self._miss(fingerprint)
            missed_at = self._missed.get(fingerprint)
            if missed_at is not None and time.monotonic() - missed_at < self.retry_after:
                self._missed.move_to_end(fingerprint)
                return False  # junk ids must not turn every bad message into a fetch
            self._catch_up()
            if fingerprint in self.registry:
                self._missed.pop(fingerprint, None)
                return True
            return self._miss(fingerprint)

    def _miss(self, fingerprint: bytes) -> bool:
        self._missed[fingerprint] = time.monotonic()
        self._missed.move_to_end(fingerprint)
        while len(self._missed) > self.max_missed:
            self._missed.popitem(last=False)
        return False

    def known_missing(self, fingerprint: bytes) -> bool:
        """True when a recent lookup did not find ``fingerprint`` (no I/O, no lock): a caller
        on the guard path can dead-letter at once instead of handing the lookup to a thread."""
        missed_at = self._missed.get(fingerprint)
        return missed_at is not None and time.monotonic() - missed_at < self.retry_after

    def missed(self) -> int:
        """Fingerprints currently cached as not published (bounded by ``max_missed``)."""
        return len(self._missed)

    def refresh(self) -> int:
        """Read what was published since the last read and register it; schemas added."""
        with self._lock:
            return self._catch_up()

    def close(self) -> None:
        """Close the consumer (the worker's shutdown); a later lookup opens a new one."""
        with self._lock:
            self._close()

    # -- reading ---------------------------------------------------------------------------

    def _catch_up(self) -> int:
        self._catch_ups += 1
        if time.monotonic() < self._unavailable_until:
            return 0
        try:
            return self._read_new()
        except KafkaError as exc:  # broker restart: go on later from the offsets reached
            log.warning("%s: cannot read the schemas topic: %s", self.topic, exc)
            self._close()
            self._unavailable_until = time.monotonic() + self.retry_after
            return 0

    def _open(self) -> KafkaConsumer | None:
        if self._consumer is not None:
            return self._consumer
        consumer = group_less_consumer(self.bootstrap_servers, **self.kafka_options)
        tps = all_partitions(consumer, self.topic)
        if not tps:
            consumer.close()  # no gateway published yet: nothing to find, ask again later
            self._unavailable_until = time.monotonic() + self.retry_after
            return None
        consumer.assign(tps)
        for tp in tps:
            if tp.partition in self._next:
                consumer.seek(tp, self._next[tp.partition])
            else:
                consumer.seek_to_beginning(tp)
        self._consumer = consumer
        return consumer

    def _close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # closing must not fail a lookup or a shutdown
                log.debug("closing the schemas consumer", exc_info=True)
            self._consumer = None

    def _read_new(self) -> int:
        consumer = self._open()
        if consumer is None:
            return 0
        tps: list[TopicPartition] = list(consumer.assignment())
        end = consumer.end_offsets(tps)
        behind = {
            tp
            for tp in tps
            if self._position(consumer, tp) < end[tp] and end[tp] != self._settled.get(tp.partition)
        }
        added = 0
        deadline = time.monotonic() + self.catch_up_deadline
        while behind and time.monotonic() < deadline:
            self.fetches += 1
            batches = consumer.poll(timeout_ms=POLL_MS, max_records=500)
            for tp, records in batches.items():
                for record in records:
                    self._next[tp.partition] = record.offset + 1
                    added += self._register(record.value)
            if not any(batches.values()):
                # Nothing more to give below the end offset (compacted away, or a broker
                # that reports the end past its last record): do not ask again for this end.
                for tp in behind:
                    self._settled[tp.partition] = end[tp]
                break
            behind = {tp for tp in behind if self._position(consumer, tp) < end[tp]}
        if added:
            log.info("registered %d writer schema(s) from %s", added, self.topic)
        return added

    def _position(self, consumer: KafkaConsumer, tp: TopicPartition) -> int:
        position = consumer.position(tp)
        self._next[tp.partition] = position
        return position

    def _register(self, value: bytes | None) -> int:
        if value is None:
            return 0
        self.records_read += 1
        try:
            before = len(self.registry)
            self.registry.register(value.decode())
            return len(self.registry) - before
        except (CodecError, UnicodeDecodeError) as exc:
            log.warning("ignoring invalid schema on %s: %s", self.topic, exc)
            return 0
