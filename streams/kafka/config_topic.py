"""Follow the compacted config topic so every worker sees every per-agent override.

Each worker reads all partitions of ``loopguard.config`` from the beginning, outside any
consumer group, on a background thread (:class:`streams.kafka.reader.TopicFollower`): a change
published once (``loopguard config set``) reaches the whole fleet within a poll interval, with
no restart. (A Faust GlobalTable would do the same, but its recovery does not complete against
the tansu broker.) ``loopguard config show`` applies the same records the same way.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from streams.core.config import ConfigError
from streams.core.fleet import parse_override_record
from streams.kafka.reader import TopicFollower

log = logging.getLogger("loopguard.config")


def record_key(record: Any) -> str:
    """A config record's key (agent id, or ``*``) as text."""
    return record.key.decode("utf-8", "replace") if record.key else ""


class ConfigOverrides:
    """Newest valid override block per key (agent id, or ``*`` for the global block), built from
    config records; a record that fails validation leaves the key's previous block in force."""

    def __init__(self) -> None:
        self._blocks: dict[str, dict[str, Any]] = {}
        self.invalid: dict[str, str] = {}  # key -> why its newest record was refused
        self._lock = threading.Lock()
        self.version = 0  # bumps on every applied change; cheap cache key for readers

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._blocks.get(key)

    def blocks(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._blocks)

    def apply(self, key: str, value: bytes | None) -> ConfigError | None:
        """Apply one config record (``None``: a tombstone); returns the error if refused."""
        with self._lock:
            self.invalid.pop(key, None)
            if value is None:
                self._blocks.pop(key, None)
            else:
                try:
                    block = parse_override_record(key, value)
                except ConfigError as exc:
                    self.invalid[key] = str(exc)
                    return exc
                self._blocks[key] = block
            self.version += 1
        return None


class ConfigWatcher(ConfigOverrides):
    """The config topic, followed for as long as the worker runs."""

    def __init__(self, bootstrap_servers: list[str], topic: str, **kafka_options: Any) -> None:
        super().__init__()
        self.topic = topic
        self._follower = TopicFollower(
            bootstrap_servers,
            topic,
            self._on_record,
            thread_name="loopguard-config",
            **kafka_options,
        )

    def start(self) -> ConfigWatcher:
        self._follower.start()
        return self

    def stop(self) -> None:
        self._follower.stop()

    def _on_record(self, record: Any) -> None:
        key = record_key(record)
        error = self.apply(key, record.value)
        if error is not None:
            log.error("ignoring invalid config override for %s: %s", key, error)
        else:
            log.info(
                "config override for %s %s", key, "removed" if record.value is None else "applied"
            )
