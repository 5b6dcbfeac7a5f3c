"""Async bridge from the Faust agents to the SQL audit store, with retry on outages.

SQLAlchemy is synchronous, so writes run in a worker thread. When the database is away the
write is retried with capped exponential backoff and the agent simply does not move on: the
unacknowledged decisions stay in the control topic, which is the outbox. Inserts are
idempotent, so whatever is redelivered after a restart lands once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

from streams.audit.store import AuditStore
from streams.core.events import Decision
from streams.observability.metrics import WorkerMetrics
from streams.settings import redact_url
from streams.wire.avro import CodecError, RunWatermark, decode_dead_letter

log = logging.getLogger("loopguard.audit")
T = TypeVar("T")


class AuditWriter:
    def __init__(
        self, url: str, max_backoff: float = 5.0, metrics: WorkerMetrics | None = None
    ) -> None:
        self.url = url
        self.metrics = metrics
        self.max_backoff = max_backoff
        self._store: AuditStore | None = None
        self._init_lock = threading.Lock()
        self.retries = 0

    def _ready_store(self) -> AuditStore:
        # Both audit agents get here first from their own threads; Alembic's migration
        # context is process-global, so exactly one of them may run it.
        with self._init_lock:
            if self._store is None:
                store = AuditStore(self.url)
                store.migrate()
                self._store = store
        return self._store

    async def _with_retry(self, what: str, work: Callable[[AuditStore], T]) -> T:
        delay = 0.1
        while True:
            try:
                return await asyncio.to_thread(lambda: work(self._ready_store()))
            except Exception as exc:  # noqa: BLE001 - never drop an audit record; retry
                self.retries += 1
                if self.metrics is not None:
                    self.metrics.audit_error()
                reason = "unavailable" if isinstance(exc, SQLAlchemyError) else "failed"
                log.warning(
                    "audit database %s %s while writing %s (%s: %s); retrying in %.1fs",
                    redact_url(self.url),
                    reason,
                    what,
                    type(exc).__name__,
                    str(exc).splitlines()[0][:200] if str(exc) else "",
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)

    async def run(self, what: str, work: Callable[[AuditStore], T]) -> T:
        """Run ``work`` on the migrated store in a thread, retried like every audit write (the
        webhook outbox shares this store, its one-time migration and its retry)."""
        return await self._with_retry(what, work)

    async def write_decisions(self, decisions: Sequence[Decision]) -> int:
        if not decisions:
            return 0
        if self.metrics is not None:
            self.metrics.set_audit_backlog(len(decisions))
        written = await self._with_retry("decisions", lambda s: s.record_decisions(decisions))
        if self.metrics is not None:
            self.metrics.set_audit_backlog(0)
            self.metrics.audit_written(len(decisions))
        return written

    async def write_progress(self, watermarks: Sequence[RunWatermark]) -> None:
        if watermarks:
            await self._with_retry("run progress", lambda s: s.record_progress(watermarks))

    async def write_dead_letter(self, value: bytes) -> None:
        try:
            letter = decode_dead_letter(value)
        except CodecError as exc:
            log.error("dead-letter record itself is unreadable: %s", exc)
            return
        await self._with_retry(
            "dead letter",
            lambda s: s.record_dead_letter(
                letter.source_topic,
                letter.partition,
                letter.offset,
                letter.error,
                letter.payload,
                letter.key,
            ),
        )
