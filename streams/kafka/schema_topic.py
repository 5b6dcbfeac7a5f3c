"""Writer schemas on a compacted topic, so a newer gateway's events decode on older workers.

A gateway publishes the Avro schema it writes with (key = fingerprint hex) before its first
event. A worker that meets a fingerprint it does not know reads the topic once, registers
what it finds and decodes the event with Avro schema resolution; a fingerprint that is still
unknown goes to the dead-letter topic. Unknown fingerprints are rare (a new gateway version),
so the worker scans on demand instead of following the topic.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kafka import KafkaProducer

from streams.kafka.reader import TopicNotFoundError, TopicReader
from streams.wire.errors import CodecError
from streams.wire.schema_registry import SchemaRegistry

log = logging.getLogger("loopguard.schemas")


def publish_schema(
    producer: KafkaProducer, topic: str, registry: SchemaRegistry, text: str
) -> None:
    """Gateway side: announce the writer schema (idempotent; compaction keeps one copy)."""
    fingerprint = registry.register(text)
    producer.send(topic, key=fingerprint.hex().encode(), value=text.encode())
    producer.flush()


class SchemaTopic:
    def __init__(
        self,
        bootstrap_servers: list[str],
        topic: str,
        registry: SchemaRegistry,
        retry_after: float = 5.0,
        **kafka_options: Any,
    ) -> None:
        self.topic = topic
        self.registry = registry
        self.retry_after = retry_after
        self.bootstrap_servers = bootstrap_servers
        self.kafka_options = kafka_options
        self._missed: dict[bytes, float] = {}

    def resolve(self, fingerprint: bytes) -> bool:
        """Make ``fingerprint`` known if any gateway published it; False if none did."""
        if fingerprint in self.registry:
            return True
        missed_at = self._missed.get(fingerprint)
        if missed_at is not None and time.monotonic() - missed_at < self.retry_after:
            return False  # junk bytes must not turn every bad message into a topic scan
        self.refresh()
        if fingerprint in self.registry:
            self._missed.pop(fingerprint, None)
            return True
        self._missed[fingerprint] = time.monotonic()
        return False

    def refresh(self) -> int:
        """Read the whole topic once and register every valid schema on it."""
        reader = TopicReader(
            self.bootstrap_servers,
            self.topic,
            kafka_options=self.kafka_options,
            poll_ms=200,
            stall_seconds=10.0,
        )
        try:
            reader.open()
        except TopicNotFoundError:
            return 0
        added = 0
        try:
            for record in reader.records():
                if record.value is None:
                    continue
                try:
                    before = len(self.registry)
                    self.registry.register(record.value.decode())
                    added += len(self.registry) - before
                except (CodecError, UnicodeDecodeError) as exc:
                    log.warning("ignoring invalid schema on %s: %s", self.topic, exc)
        finally:
            reader.close()
        if added:
            log.info("registered %d writer schema(s) from %s", added, self.topic)
        return added
