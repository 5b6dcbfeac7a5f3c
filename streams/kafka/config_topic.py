"""Follow the compacted config topic so every worker sees every per-agent override.

Each worker reads all partitions of ``loopguard.config`` from the beginning, outside any
consumer group, on a background thread (:class:`streams.kafka.reader.TopicFollower`): a change
published once (``loopguard config set``) reaches the whole fleet within a poll interval, with
no restart. (A Faust GlobalTable would do the same, but its recovery does not complete against
the tansu broker.) ``loopguard config show`` applies the same records the same way.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from streams.core.config import ConfigError, LoopDetectionConfig
from streams.core.config_canary import weakening
from streams.core.config_change import (
    CLIENT_ID_HEADER,
    HOST_HEADER,
    PRINCIPAL_HEADER,
    REFUSED,
    REMOVED,
    SET,
    SOURCE_CLI,
    SOURCE_HEADER,
    SOURCE_TOPIC,
    USER_HEADER,
    WEAKENED_LABEL,
    ConfigChange,
    decode_headers,
    turns_guarding_off,
)
from streams.core.fleet import GLOBAL_KEY, override_path, parse_override_record
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
                    refused = ConfigError(_clip(str(exc)))  # a value quoted whole can be 1 MB
                    self.invalid[key] = str(refused)
                    return refused
                except Exception as exc:  # noqa: BLE001 - whatever a hostile record does: refused
                    refused = ConfigError(f"{override_path(key)}: cannot be read: {_why(exc)}")
                    self.invalid[key] = str(refused)
                    return refused
                self._blocks[key] = block
            self.version += 1
        return None


ERROR_LIMIT = 1000  # characters kept of a refused record's error (it may quote the value)
# One poll's longest wait: records are handed over as they arrive, so a long poll only
# makes an idle follower wake up less (issue 42); stop() waits for it at most this long.
IDLE_POLL_MS = 1000


def _clip(text: str) -> str:
    return text if len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT - 1] + "…"


def _why(exc: BaseException) -> str:
    """An exception in one short line (a refused record's error)."""
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def judge_weakening(before: LoopDetectionConfig | None, after: LoopDetectionConfig | None) -> str:
    """Which canonical loops a change no longer stops (streams.core.config_canary); "" when
    none, or when a side is unknown. A failure to judge is said, never raised."""
    if before is None or after is None:
        return ""
    try:
        return weakening(before, after)
    except Exception as exc:  # noqa: BLE001 - the change is still recorded and applied
        log.exception("judging a config change's effect")
        return f"effect not judged ({_why(exc)})"


def change_from_record(
    record: Any,
    key: str,
    before: LoopDetectionConfig | None,
    after: LoopDetectionConfig | None,
    error: ConfigError | None,
    recorded_by: str = "",
    weakened: str = "",
) -> ConfigChange:
    """The :class:`ConfigChange` a config record made: its value, the key's effective config
    version before and after (when known), which canonical loops it no longer stops
    (``weakened``), its sender's headers and where it is on the topic."""
    headers = decode_headers(getattr(record, "headers", None))
    value = None if record.value is None else record.value.decode("utf-8", "replace")
    action = REFUSED if error is not None else REMOVED if record.value is None else SET
    disables = (
        key == GLOBAL_KEY and action == SET and after is not None and turns_guarding_off(after)
    )
    return ConfigChange(
        change_id=f"{record.topic}:{record.partition}:{record.offset}",
        source=SOURCE_CLI if headers.get(SOURCE_HEADER) == SOURCE_CLI else SOURCE_TOPIC,
        action=action,
        agent_key=key,
        value=value,
        changed_at=int(record.timestamp) if record.timestamp is not None else 0,
        version_before=before.version if before is not None else "",
        version_after=after.version if after is not None else "",
        error=str(error) if error is not None else "",
        disables=disables,
        weakened=weakened if error is None else "",
        principal=headers.get(PRINCIPAL_HEADER, ""),
        client_id=headers.get(CLIENT_ID_HEADER, ""),
        sender_user=headers.get(USER_HEADER, ""),
        sender_host=headers.get(HOST_HEADER, ""),
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        recorded_by=recorded_by,
    )


class ConfigWatcher(ConfigOverrides):
    """The config topic, followed for as long as the worker runs.

    Every record also becomes a :class:`ConfigChange` handed to ``on_change`` (the worker's
    recorder, which must not wait); ``resolve`` gives a key's effective config, for the
    versions before and after. A change that turns guarding off or to observe for every
    agent is logged at WARNING with its value and sender."""

    def __init__(
        self,
        bootstrap_servers: list[str],
        topic: str,
        on_change: Callable[[ConfigChange], None] | None = None,
        **kafka_options: Any,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.on_change = on_change
        self.resolve: Callable[[str], LoopDetectionConfig] | None = None
        self.host = socket.gethostname()
        self._follower = TopicFollower(
            bootstrap_servers,
            topic,
            self._on_record,
            thread_name="loopguard-config",
            poll_ms=IDLE_POLL_MS,
            **kafka_options,
        )

    def start(self) -> ConfigWatcher:
        self._follower.start()
        return self

    def stop(self) -> None:
        self._follower.stop()

    def _effective(self, key: str) -> LoopDetectionConfig | None:
        if self.resolve is None:
            return None
        try:
            return self.resolve(key)
        except Exception as exc:  # noqa: BLE001 - the versions are then unknown, said so
            log.error("cannot resolve the config of %s: %s", key, _why(exc))
            return None

    def _on_record(self, record: Any) -> None:
        key = record_key(record)
        before = self._effective(key)
        error = self.apply(key, record.value)
        after = self._effective(key)
        weakened = judge_weakening(before, after) if error is None else ""
        change = change_from_record(record, key, before, after, error, self.host, weakened)
        if error is not None:
            log.error(
                "ignoring invalid config override for %s from %s: %s", key, change.sender, error
            )
        elif change.disables:
            log.warning(
                "config override for * turns guarding %s for every agent: %s (from %s, "
                "%s[%d]@%d, config version %s -> %s)%s",
                "OFF" if after is not None and after.enabled is False else "to OBSERVE ONLY",
                _compact(change.value),
                change.sender,
                record.topic,
                record.partition,
                record.offset,
                change.version_before or "?",
                change.version_after or "?",
                f"; {change.weakened}" if change.weakened else "",
            )
        elif change.weakened:
            log.warning(
                "%s by the config override for %s: %s; value %s (from %s, %s[%d]@%d, config "
                "version %s -> %s)",
                WEAKENED_LABEL,
                key,
                change.weakened,
                _compact(change.value),
                change.sender,
                record.topic,
                record.partition,
                record.offset,
                change.version_before or "?",
                change.version_after or "?",
            )
        elif error is None and not change.disables:
            log.info(
                "config override for %s %s (from %s, config version %s -> %s)",
                key,
                "removed" if record.value is None else "applied",
                change.sender,
                change.version_before or "?",
                change.version_after or "?",
            )
        if self.on_change is not None:
            self.on_change(change)


def _compact(value: str | None) -> str:
    """A config value for one log line: JSON without spaces when it parses."""
    if value is None:
        return "(removed)"
    try:
        return json.dumps(json.loads(value), separators=(",", ":"), sort_keys=True)[:500]
    except (ValueError, RecursionError):
        return value[:500]
