"""Follow the compacted config topic so every worker sees every per-agent override.

Each worker reads all partitions of ``loopguard.config`` from the beginning, outside any
consumer group, on a background thread: a change published once (``loopguard config set``)
reaches the whole fleet within a poll interval, with no restart. (A Faust GlobalTable would
do the same, but its recovery does not complete against the tansu broker.)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from kafka import KafkaConsumer

from streams.core.config import ConfigError, check_block
from streams.kafka.topics import all_partitions

log = logging.getLogger("loopguard.config")


class ConfigWatcher:
    """Latest override block per key (agent id, or ``*`` for the global block)."""

    def __init__(self, bootstrap_servers: list[str], topic: str, **kafka_options: Any) -> None:
        self.topic = topic
        self._options = {"bootstrap_servers": bootstrap_servers, **kafka_options}
        self._blocks: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.version = 0  # bumps on every applied change; cheap cache key for readers
        self._thread: threading.Thread | None = None

    def start(self) -> ConfigWatcher:
        self._thread = threading.Thread(target=self._run, name="loopguard-config", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._blocks.get(key)

    def apply(self, key: str, value: bytes | None) -> None:
        """Apply one config record; invalid blocks are logged and ignored, never half-used."""
        with self._lock:
            if value is None:
                self._blocks.pop(key, None)
            else:
                try:
                    block = json.loads(value)
                    check_block(block, f"{self.topic}[{key}]")
                except (ValueError, ConfigError) as exc:
                    log.error("ignoring invalid config override for %s: %s", key, exc)
                    return
                self._blocks[key] = block
            self.version += 1
        log.info("config override for %s %s", key, "removed" if value is None else "applied")

    def _run(self) -> None:
        consumer = None
        while not self._stop.is_set():
            try:
                if consumer is None:
                    consumer = KafkaConsumer(
                        group_id=None, enable_auto_commit=False, **self._options
                    )
                    assigned = all_partitions(consumer, self.topic)
                    if not assigned:
                        consumer.close()
                        consumer = None
                        time.sleep(1.0)
                        continue
                    consumer.assign(assigned)
                    consumer.seek_to_beginning(*assigned)
                for records in consumer.poll(timeout_ms=200).values():
                    for record in records:
                        key = record.key.decode() if record.key else ""
                        self.apply(key, record.value)
            except Exception as exc:  # broker restarts: reconnect, keep the last known config
                log.warning("config watcher reconnecting after: %s", exc)
                if consumer is not None:
                    consumer.close()
                consumer = None
                time.sleep(1.0)
        if consumer is not None:
            consumer.close()
