"""Async bridge from the Faust agents to the SQL audit store: outages are waited out, records
the database refuses are quarantined, and nothing here can stop the guard.

SQLAlchemy is synchronous, so writes run in a worker thread. Two kinds of failure, told apart
by :func:`~streams.audit.write_errors.is_data_error`:

- the database is away, read-only, full or locked: the write is retried with capped
  exponential backoff, on a fresh engine each time (a SQLite file opened read-only stays
  read-only on its connection; a dead PostgreSQL connection stays dead), and the agent does
  not move on: the unacknowledged records stay in the control topic, which is the outbox;
- the database refuses a record for its data (a NUL byte in PostgreSQL text): the batch is
  written row by row, a row refused ``refused_tries`` times goes to the quarantine
  (:mod:`streams.audit.quarantine`) with the database's error, and the trail goes on.

Inserts are idempotent, so whatever is redelivered after a restart lands once. The writer
also keeps what ``/healthz`` reports of the write path (:meth:`AuditWriter.health`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from streams.audit import quarantine
from streams.audit.quarantine import Quarantined
from streams.audit.store import AuditStore
from streams.audit.write_errors import error_text, is_data_error
from streams.core.events import Decision
from streams.observability.metrics import WorkerMetrics
from streams.settings import redact_url
from streams.wire.avro import DeadLetterRecord, RunWatermark, decode_dead_letter
from streams.wire.errors import one_line

log = logging.getLogger("loopguard.audit")
T = TypeVar("T")
R = TypeVar("R")

REFUSED_TRIES = 3  # a record refused for its data this often goes to the quarantine
LAGGING_SECONDS = 10.0  # a write pending this long makes the audit trail "lagging"


class RecordRefused(Exception):
    """The database refused the record(s) for their data; ``error`` is its answer."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class AuditWriter:
    def __init__(
        self,
        url: str,
        max_backoff: float = 5.0,
        metrics: WorkerMetrics | None = None,
        refused_tries: int = REFUSED_TRIES,
        engine_options: dict[str, Any] | None = None,
    ) -> None:
        self.url = url
        self.metrics = metrics
        self.max_backoff = max_backoff
        self.refused_tries = max(1, refused_tries)
        self.engine_options = engine_options or {}
        self._store: AuditStore | None = None
        self._init_lock = threading.Lock()
        self.retries = 0
        self.quarantined = 0
        # What /healthz reports (written from the event loop only).
        self.last_success_at: float | None = None
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self._pending: dict[int, tuple[float, int]] = {}  # write -> (since, records)

    # -- the store, reopened after an operational error -------------------------------------

    def _ready_store(self) -> AuditStore:
        # Both audit agents get here first from their own threads; Alembic's migration
        # context is process-global, so exactly one of them may run it.
        with self._init_lock:
            if self._store is None:
                store = AuditStore(self.url, **self.engine_options)
                try:
                    store.migrate()
                except BaseException:
                    store.close()
                    raise
                self._store = store
        return self._store

    def _reopen(self) -> None:
        """Drop the engine after an operational error: the next write connects afresh."""
        with self._init_lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()

    def close(self) -> None:
        self._reopen()

    # -- retry and refusal --------------------------------------------------------------------

    async def _with_retry(
        self, what: str, work: Callable[[AuditStore], T], refusals: bool = True
    ) -> T:
        """``work`` on the store until it succeeds; an operational error is retried with
        backoff on a fresh engine, a data error raises :class:`RecordRefused` (when
        ``refusals``; else it is retried like the others)."""
        delay = 0.1
        while True:
            try:
                result = await asyncio.to_thread(lambda: work(self._ready_store()))
            except Exception as exc:  # noqa: BLE001 - classified below; never lost
                self._failed(exc)
                if refusals and is_data_error(exc):
                    raise RecordRefused(error_text(exc)) from exc
                self.retries += 1
                log.warning(
                    "audit database %s unavailable while writing %s (%s); retrying in %.1fs",
                    redact_url(self.url),
                    what,
                    error_text(exc, 300).splitlines()[0],
                    delay,
                )
                await asyncio.to_thread(self._reopen)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
            else:
                self.last_success_at = time.time()
                return result

    def _failed(self, exc: BaseException) -> None:
        self.last_error = error_text(exc, 300).splitlines()[0]
        self.last_error_at = time.time()
        if self.metrics is not None:
            self.metrics.audit_error()

    async def _write_rows(
        self,
        what: str,
        rows: Sequence[R],
        write: Callable[[AuditStore, Sequence[R]], int],
        refused: Callable[[R, str, int], Quarantined],
    ) -> tuple[int, list[R]]:
        """Write ``rows`` at once; if the database refuses them for their data, one by one,
        quarantining each row it refuses ``refused_tries`` times. Returns (rows newly
        written, rows quarantined)."""
        if not rows:
            return 0, []
        token = id(rows)
        self._pending[token] = (time.time(), len(rows))
        self._backlog()
        try:
            try:
                return await self._with_retry(what, lambda s: write(s, rows)), []
            except RecordRefused as exc:
                log.warning(
                    "audit database refused a batch of %d %s (%s); writing them one by one",
                    len(rows),
                    what,
                    exc.error.splitlines()[0][:200],
                )
            written, kept_out = 0, []
            for row in rows:
                n = await self._write_one(what, row, write, refused)
                if n is None:
                    kept_out.append(row)
                else:
                    written += n
            return written, kept_out
        finally:
            del self._pending[token]
            self._backlog()

    async def _write_one(
        self,
        what: str,
        row: R,
        write: Callable[[AuditStore, Sequence[R]], int],
        refused: Callable[[R, str, int], Quarantined],
    ) -> int | None:
        """One row: its count written, or None once it went to the quarantine."""
        error = ""
        for attempt in range(1, self.refused_tries + 1):
            try:
                return await self._with_retry(what, lambda s: write(s, [row]))
            except RecordRefused as exc:
                error = exc.error
                if attempt < self.refused_tries:
                    await asyncio.sleep(0.05 * attempt)
        entry = refused(row, error, self.refused_tries)
        try:
            await self._with_retry(f"quarantined {what}", lambda s: quarantine.record(s, entry))
        except RecordRefused as exc:  # escaped text and bytes: should never happen
            log.error("audit quarantine refused %s %s too: %s", what, entry.record_key, exc.error)
        self.quarantined += 1
        if self.metrics is not None:
            self.metrics.audit_quarantined()
        log.error(
            "audit database refused %s %s %d times (%s); quarantined in audit_quarantine, "
            "the audit trail goes on",
            entry.kind,
            entry.record_key[:120],
            self.refused_tries,
            error.splitlines()[0][:300] if error else "",
        )
        return None

    def _backlog(self) -> None:
        if self.metrics is not None:
            self.metrics.set_audit_backlog(self.backlog())

    # -- what the agents call ------------------------------------------------------------------

    async def run(self, what: str, work: Callable[[AuditStore], T]) -> T:
        """Run ``work`` on the migrated store in a thread, retried like every audit write (the
        webhook outbox shares this store, its one-time migration and its retry). A data
        error is tried ``refused_tries`` times, then raises :class:`RecordRefused`."""
        for attempt in range(1, self.refused_tries + 1):
            try:
                return await self._with_retry(what, work)
            except RecordRefused:
                if attempt == self.refused_tries:
                    raise
                await asyncio.sleep(0.05 * attempt)
        raise AssertionError("unreachable")

    async def write_decisions(self, decisions: Sequence[Decision]) -> int:
        """Store decisions; returns how many were new (quarantined ones are not)."""
        written, _ = await self.store_decisions(decisions)
        return written

    async def store_decisions(self, decisions: Sequence[Decision]) -> tuple[int, list[Decision]]:
        """Store decisions; returns (how many were new, the decisions stored or already
        there: every one but those the database refused and the quarantine kept)."""
        written, refused = await self._write_rows(
            "decisions", decisions, AuditStore.record_decisions, quarantine.for_decision
        )
        if self.metrics is not None:
            self.metrics.audit_written(written)
        if not refused:
            return written, list(decisions)
        out = {id(d) for d in refused}
        return written, [d for d in decisions if id(d) not in out]

    async def write_progress(self, watermarks: Sequence[RunWatermark]) -> None:
        def record(store: AuditStore, marks: Sequence[RunWatermark]) -> int:
            store.record_progress(marks)
            return len(marks)

        await self._write_rows("run progress", watermarks, record, quarantine.for_progress)

    async def write_dead_letter(self, value: bytes) -> None:
        try:
            letter = decode_dead_letter(value)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the trail
            log.error("dead-letter record itself is unreadable: %s", one_line(exc))
            return
        await self.write_dead_letters([letter])

    async def write_dead_letters(self, letters: Sequence[DeadLetterRecord]) -> None:
        """Store dead letters (a record an audit agent could not read, issue 40, or one
        from the dead-letter topic); idempotent per source position."""
        if not letters:
            return

        def record(store: AuditStore, letters: Sequence[DeadLetterRecord]) -> int:
            return sum(
                store.record_dead_letter(
                    d.source_topic, d.partition, d.offset, d.error, d.payload, d.key
                )
                for d in letters
            )

        await self._write_rows("dead letter", letters, record, quarantine.for_dead_letter)

    # -- health --------------------------------------------------------------------------------

    def backlog(self) -> int:
        """Records handed to the writer and not written yet."""
        return sum(n for _, n in self._pending.values())

    def health(self, now: float | None = None) -> dict[str, Any]:
        """The write path for ``/healthz``: "ok", "lagging" (a write pending for over
        LAGGING_SECONDS) or "failing" (its latest attempt failed and it is still pending)."""
        now = time.time() if now is None else now
        oldest = min((since for since, _ in self._pending.values()), default=None)
        pending_for = None if oldest is None else round(now - oldest, 1)
        failing = (
            oldest is not None
            and self.last_error_at is not None
            and self.last_error_at >= (self.last_success_at or 0.0)
        )
        if failing:
            status = "failing"
        elif pending_for is not None and pending_for > LAGGING_SECONDS:
            status = "lagging"
        else:
            status = "ok"

        def age(at: float | None) -> float | None:
            return None if at is None else round(now - at, 1)

        return {
            "status": status,
            "last_write_age_seconds": age(self.last_success_at),
            "pending_seconds": pending_for,
            "backlog": self.backlog(),
            "last_error": self.last_error,
            "last_error_age_seconds": age(self.last_error_at),
            "quarantined": self.quarantined,
            "retries": self.retries,
        }
