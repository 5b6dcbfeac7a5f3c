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
later is still found: any later catch-up notes where it is, whoever asked).

What a flood of the topic can cost is bounded too (issue 40: 30,000 schemas held a looping
run's abort for 21 s and grew the worker by 244 MB): a catch-up parses only the schema it
was asked for (the record keyed by its fingerprint's hex, as gateways publish) and notes where
every schema read is (a bounded index: fingerprint -> partition and offset), so one asked
later, or evicted from the registry since, is fetched alone; the registry keeps the most
recently used schemas only
(:data:`~streams.wire.schema_registry.MAX_WRITER_SCHEMAS`); and lookups are shared out per
producer (:mod:`streams.kafka.lookup_quota`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from streams.kafka.lookup_quota import LookupQuota
from streams.kafka.reader import group_less_consumer
from streams.kafka.topics import all_partitions
from streams.wire.envelope_peek import UNKNOWN_PRODUCER
from streams.wire.errors import one_line
from streams.wire.schema_registry import SchemaRegistry, parse_schema_text

log = logging.getLogger("loopguard.schemas")

# Defaults: a fingerprint not found is not looked for again for 5 s (a catch-up for another
# fingerprint still finds it sooner); at most 10,000 such fingerprints are remembered (about
# 1 MB); one catch-up gives up after 2 s (a broker that cannot answer must not hold a partition).
RETRY_AFTER_S = 5.0
MAX_MISSED = 10_000
CATCH_UP_DEADLINE_S = 2.0
FETCH_WAIT_MS = 50
POLL_MS = 200  # one poll; records below the end offset are there, so it returns at once
# Schemas read but not asked for, remembered by where they are (~235 bytes each: 11 MiB at
# most, bench/schema_flood_bench.py); the oldest noted is forgotten first.
MAX_INDEXED = 50_000


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
        quota: LookupQuota | None = None,
        max_indexed: int = MAX_INDEXED,
        **kafka_options: Any,
    ) -> None:
        self.topic = topic
        self.registry = registry
        self.quota = quota or LookupQuota()
        self.max_indexed = max(int(max_indexed), 1)
        # fingerprint -> (partition, offset) of its newest record read, registered or not
        self._index: OrderedDict[bytes, tuple[int, int]] = OrderedDict()
        self._wanted: bytes | None = None  # the fingerprint the catch-up under way is for
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

    def resolve(self, fingerprint: bytes, producer: str = UNKNOWN_PRODUCER) -> bool:
        """Make ``fingerprint`` known if any gateway published it; False if none did, or if
        ``producer`` (the gateway the event names) has no lookup left just now."""
        if fingerprint in self.registry:
            return True
        asked_at = self._catch_ups
        with self._lock:
            self.lookups += 1
            if fingerprint in self.registry:  # a catch-up while we waited found it
                return True
            if fingerprint not in self._index:
                if self._catch_ups > asked_at:
                    # A catch-up started after we asked has read everything published before
                    # the event we hold: its answer is ours, no need to fetch again.
                    return self._miss(fingerprint)
                missed_at = self._missed.get(fingerprint)
                if missed_at is not None and time.monotonic() - missed_at < self.retry_after:
                    self._missed.move_to_end(fingerprint)
                    return False  # junk ids must not turn every bad message into a fetch
            if not self.quota.take(producer):
                # Answered as a miss (its event is dead-lettered, replayable), and remembered
                # as one for ``retry_after``: the flood's next ids cost a look-up each.
                log.warning(
                    "%s: schema lookups of producer %r over quota: %s not looked up",
                    self.topic, producer, fingerprint.hex(),
                )  # fmt: skip
                return self._miss(fingerprint)
            if fingerprint not in self._index:
                self._catch_up(fingerprint)
            if fingerprint in self._index and fingerprint not in self.registry:
                self._fetch_indexed(fingerprint)  # read before (or evicted since), not parsed
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
        """Read what was published since the last read and note where each schema is;
        records read."""
        with self._lock:
            return self._catch_up(None)

    def indexed(self) -> int:
        """Schemas read, noted by where they are (``max_indexed`` at most)."""
        return len(self._index)

    def close(self) -> None:
        """Close the consumer (the worker's shutdown); a later lookup opens a new one."""
        with self._lock:
            self._close()

    # -- reading ---------------------------------------------------------------------------

    def _catch_up(self, wanted: bytes | None) -> int:
        self._catch_ups += 1
        if time.monotonic() < self._unavailable_until:
            return 0
        self._wanted = wanted
        try:
            return self._read_new()
        except KafkaError as exc:  # broker restart: go on later from the offsets reached
            log.warning("%s: cannot read the schemas topic: %s", self.topic, exc)
            self._close()
            self._unavailable_until = time.monotonic() + self.retry_after
            return 0
        finally:
            self._wanted = None

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
        read = 0
        deadline = time.monotonic() + self.catch_up_deadline
        while behind and time.monotonic() < deadline:
            self.fetches += 1
            batches = consumer.poll(timeout_ms=POLL_MS, max_records=500)
            for tp, records in batches.items():
                for record in records:
                    self._next[tp.partition] = record.offset + 1
                    read += self._note(record.key, record.value, tp.partition, record.offset)
            if not any(batches.values()):
                # Nothing more to give below the end offset (compacted away, or a broker
                # that reports the end past its last record): do not ask again for this end.
                for tp in behind:
                    self._settled[tp.partition] = end[tp]
                break
            behind = {tp for tp in behind if self._position(consumer, tp) < end[tp]}
        return read

    def _position(self, consumer: KafkaConsumer, tp: TopicPartition) -> int:
        position = consumer.position(tp)
        self._next[tp.partition] = position
        return position

    def _note(self, key: bytes | None, value: bytes | None, partition: int, offset: int) -> int:
        """A record read: noted by where it is, and registered when it is the schema asked
        for. Keyed otherwise than by a fingerprint's hex (gateways key it so): ignored."""
        fingerprint = _fingerprint_of_key(key)
        if fingerprint is None or value is None:
            if value is not None:
                log.warning("ignoring a schema on %s not keyed by its fingerprint", self.topic)
            return 0
        self.records_read += 1
        self._index[fingerprint] = (partition, offset)  # its newest copy
        self._index.move_to_end(fingerprint)
        while len(self._index) > self.max_indexed:
            self._index.popitem(last=False)
        if fingerprint == self._wanted and not self._register(fingerprint, value):
            self._index.pop(fingerprint, None)  # refused: not fetched again for nothing
        return 1

    def _fetch_indexed(self, fingerprint: bytes) -> None:
        """Read the one record noted for ``fingerprint`` (a consumer of its own: the topic's
        reader stays where it is) and register it; the note goes when that fails."""
        partition, offset = self._index[fingerprint]
        self._index.move_to_end(fingerprint)
        tp = TopicPartition(self.topic, partition)
        registered = False
        consumer = group_less_consumer(self.bootstrap_servers, **self.kafka_options)
        try:
            consumer.assign([tp])
            consumer.seek(tp, offset)
            deadline = time.monotonic() + self.catch_up_deadline
            while time.monotonic() < deadline:
                self.fetches += 1
                for records in consumer.poll(timeout_ms=POLL_MS, max_records=1).values():
                    record = records[0]
                    if record.offset == offset and _fingerprint_of_key(record.key) == fingerprint:
                        registered = self._register(fingerprint, record.value)
                    return  # else compacted away since: a catch-up notes its newer copy
        except KafkaError as exc:
            log.warning("%s: cannot read a schema: %s", self.topic, exc)
        finally:
            consumer.close()
            if not registered:
                self._index.pop(fingerprint, None)

    def _register(self, fingerprint: bytes, value: bytes | None) -> bool:
        """Parse and register the schema a record keyed ``fingerprint`` holds; False when
        it is not one, or not the one its key names."""
        if value is None:
            return False
        try:
            schema = parse_schema_text(value.decode())
        except Exception as exc:  # noqa: BLE001 - one record must never stop the lookups
            log.warning("ignoring invalid schema on %s: %s", self.topic, one_line(exc))
            return False
        if schema.fingerprint != fingerprint:
            log.warning(
                "ignoring a schema on %s keyed %s: its fingerprint is %s",
                self.topic, fingerprint.hex(), schema.fingerprint.hex(),
            )  # fmt: skip
            return False
        self.registry.add(schema)
        log.info("registered writer schema %s from %s", fingerprint.hex(), self.topic)
        return True


def _fingerprint_of_key(key: bytes | None) -> bytes | None:
    """The fingerprint a schemas-topic key names (16 hex digits), None for any other key."""
    if key is None or len(key) != 16:
        return None
    try:
        return bytes.fromhex(key.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
