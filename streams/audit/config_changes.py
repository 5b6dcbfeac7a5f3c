"""Config changes in the audit trail: stored once each, listed newest first.

The worker records every config-topic record it applies or refuses, and its config file at
start (:class:`ConfigChangeRecorder`, a thread of its own fed without waiting: a database that
is down delays the record, never the config). ``loopguard config history`` and the status page
read them back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from streams.audit.models import ConfigChangeRow
from streams.core.config_change import FILE_KEY, SOURCE_FILE, ConfigChange

if TYPE_CHECKING:
    from streams.audit.store import AuditStore

log = logging.getLogger("loopguard.config")

_FIELDS = ConfigChange.__slots__  # type: ignore[attr-defined]


def _clean(text: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL; a header or a refused record may."""
    return None if text is None else text.replace("\x00", "\\x00")


def record_change(store: AuditStore, change: ConfigChange) -> bool:
    """Store ``change`` unless its ``change_id`` is stored already; True when it was new."""
    values = {name: getattr(change, name) for name in _FIELDS}
    for name, value in values.items():
        if isinstance(value, str):
            values[name] = _clean(value)
    stmt = (
        _insert(store)
        .values(**values)
        .on_conflict_do_nothing(index_elements=[ConfigChangeRow.change_id])
        .returning(ConfigChangeRow.id)
    )
    with store.engine.begin() as conn:
        return conn.execute(stmt).first() is not None


def _insert(store: AuditStore) -> Any:
    """Dialect-specific INSERT, for ON CONFLICT."""
    dialect = store.engine.dialect.name
    return (postgresql if dialect == "postgresql" else sqlite).insert(ConfigChangeRow)


def record_file_change(store: AuditStore, change: ConfigChange) -> bool:
    """Store a config file load when its document or its version differs from the file last
    stored for the same app (``change.topic`` holds ``app_id:path``): a worker restarted on the
    same file, or every worker of the fleet loading it, records nothing new; an edit of an
    agent block alone (the version is the global block's) or a release whose defaults change
    the version of the same file does."""
    with store.engine.connect() as conn:
        row = conn.execute(
            select(ConfigChangeRow.version_after, ConfigChangeRow.value)
            .where(ConfigChangeRow.source == SOURCE_FILE, ConfigChangeRow.topic == change.topic)
            .order_by(ConfigChangeRow.changed_at.desc(), ConfigChangeRow.id.desc())
            .limit(1)
        ).first()
    before, before_value = (row[0], row[1]) if row else ("", None)
    if before == change.version_after and before_value == change.value:
        return False
    stored = dataclasses.replace(
        change,
        version_before=before,
        change_id=f"file:{change.topic}:{before}->{change.version_after}:"
        f"{_digest(before_value)}->{_digest(change.value)}",
    )
    return record_change(store, stored)


def _digest(document: str | None) -> str:
    """A short hash of a stored file document (its change id tells edits apart)."""
    return hashlib.sha256((document or "").encode()).hexdigest()[:12]


def config_history(
    store: AuditStore, agent: str | None = None, limit: int = 50
) -> list[ConfigChange]:
    """Changes newest first; ``agent`` keeps those of one key (an agent id, ``*``, or
    ``(file)``)."""
    stmt = select(ConfigChangeRow)
    if agent is not None:
        stmt = stmt.where(ConfigChangeRow.agent_key == agent)
    stmt = stmt.order_by(ConfigChangeRow.changed_at.desc(), ConfigChangeRow.id.desc()).limit(limit)
    with store.engine.connect() as conn:
        rows = conn.execute(stmt).mappings().all()
    return [ConfigChange(**{name: row[name] for name in _FIELDS}) for row in rows]


def latest_change(store: AuditStore) -> ConfigChange | None:
    """The newest change of all (the status page shows it), or None."""
    found = config_history(store, limit=1)
    return found[0] if found else None


class ConfigChangeRecorder:
    """Records changes on a thread of its own: :meth:`submit` never waits.

    ``write`` stores one change and says whether it was new (the worker passes one that goes
    through its audit writer, which waits out a database that is down); ``on_new`` then sees
    each change stored for the first time (the worker posts the webhook of a change that turns
    guarding off). A ``write`` that raises (the database refuses the row for its data) is tried
    ``max_attempts`` times, then the change is given up with an error in the log, so one bad
    change never holds up the next. A full queue (``queue_size`` changes waiting for the
    database) drops what comes next, with an error in the log: memory stays bounded while the
    database is away."""

    def __init__(
        self,
        write: Callable[[ConfigChange], bool],
        on_new: Callable[[ConfigChange], None] | None = None,
        queue_size: int = 10_000,
        retry_seconds: float = 1.0,
        max_attempts: int = 3,
    ) -> None:
        self.write = write
        self.max_attempts = max(1, max_attempts)
        self.on_new = on_new
        self.retry_seconds = retry_seconds
        self._queue: queue.Queue[ConfigChange] = queue.Queue(maxsize=max(1, queue_size))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def submit(self, change: ConfigChange) -> None:
        try:
            self._queue.put_nowait(change)
        except queue.Full:
            self.dropped += 1
            log.error(
                "config change %s for %s not recorded: %d changes already wait for the "
                "audit database",
                change.change_id,
                change.agent_key,
                self._queue.qsize(),
            )

    def waiting(self) -> int:
        return self._queue.qsize()

    def start(self) -> ConfigChangeRecorder:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="loopguard-config-audit", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                change = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            self._store(change)

    def _store(self, change: ConfigChange) -> None:
        attempt = 0
        while not self._stop.is_set():
            attempt += 1
            try:
                new = self.write(change)
            except Exception as exc:  # noqa: BLE001 - a refused row: a few tries, then the next
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                if attempt >= self.max_attempts:
                    self.dropped += 1
                    log.error(
                        "config change %s for %s not recorded after %d tries (%s): %s",
                        change.change_id,
                        change.agent_key,
                        attempt,
                        why,
                        change.value,
                    )
                    return
                log.warning(
                    "config change %s not recorded yet (%s); retrying in %.1fs",
                    change.change_id,
                    why,
                    self.retry_seconds,
                )
                self._stop.wait(self.retry_seconds)
                continue
            if new and self.on_new is not None:
                try:
                    self.on_new(change)
                except Exception:
                    log.exception("handling the new config change %s", change.change_id)
            return


__all__ = [
    "FILE_KEY",
    "ConfigChangeRecorder",
    "config_history",
    "latest_change",
    "record_change",
    "record_file_change",
]
