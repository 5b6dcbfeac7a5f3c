"""The webhook outbox: one ``webhook_deliveries`` row per block/abort decision id.

Why a table and not only memory: the notifier acknowledges control-topic messages long
before a slow endpoint answers, so what is queued must survive a restart (``pending`` rows
are picked up again), and a decision redelivered by Kafka, or seen by a second worker, must
not be posted twice (the decision id is the primary key; a send is *claimed* first).

Status moves one way: ``pending`` → ``sending`` (claimed by one sender) → ``sent`` or
``failed``; ``dropped`` when the in-memory queue was full. A row left ``sending`` by a worker
that died mid-post is never resent: the endpoint may have received it, and "never twice"
wins over "at least once" for a notification.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from streams.audit.models import WebhookDelivery
from streams.audit.store import AuditStore

PENDING, SENDING, SENT, FAILED, DROPPED = "pending", "sending", "sent", "failed", "dropped"
_ERROR_LIMIT = 500


@dataclass(frozen=True, slots=True)
class Notice:
    """What a sender needs to post one notification."""

    decision_id: str
    run_id: str
    agent_id: str
    action: str
    body: str  # JSON text


def add(store: AuditStore, notices: Sequence[Notice], status: str = PENDING) -> list[str]:
    """Insert notices not stored yet with ``status``; returns the decision ids that were new
    (the others were already recorded: a redelivery, or another worker's)."""
    if not notices:
        return []
    dialect = postgresql if store.engine.dialect.name == "postgresql" else sqlite
    stmt = (
        dialect.insert(WebhookDelivery)
        .on_conflict_do_nothing(index_elements=[WebhookDelivery.decision_id])
        .returning(WebhookDelivery.decision_id)
    )
    rows: list[dict[str, Any]] = [
        {
            "decision_id": n.decision_id,
            "run_id": n.run_id,
            "agent_id": n.agent_id,
            "action": n.action,
            "body": n.body,
            "status": status,
        }
        for n in notices
    ]
    with store.engine.begin() as conn:
        return [row[0] for row in conn.execute(stmt, rows)]


def claim(store: AuditStore, decision_id: str) -> bool:
    """Take a pending notice for sending; False when it is not pending (sent, or taken by
    another sender or worker). Only the claimant posts, so a notice goes out once."""
    return _move(store, decision_id, PENDING, SENDING) == 1


def finish(store: AuditStore, decision_id: str, status: str, attempts: int, error: str) -> None:
    """Record how a claimed notice ended (``sent`` or ``failed``)."""
    _move(store, decision_id, SENDING, status, attempts=attempts, last_error=error[:_ERROR_LIMIT])


def drop(store: AuditStore, decision_ids: Sequence[str]) -> None:
    """Mark pending notices that found the queue full as ``dropped`` (never posted)."""
    t = WebhookDelivery
    stmt = (
        update(t)
        .where(t.decision_id.in_(list(decision_ids)), t.status == PENDING)
        .values(status=DROPPED, updated_at=func.now())
    )
    with store.engine.begin() as conn:
        conn.execute(stmt)


def pending(store: AuditStore, limit: int) -> list[Notice]:
    """Notices queued but never claimed, oldest first: what a restarted worker sends."""
    t = WebhookDelivery
    stmt = (
        select(t.decision_id, t.run_id, t.agent_id, t.action, t.body)
        .where(t.status == PENDING)
        .order_by(t.created_at, t.decision_id)
        .limit(limit)
    )
    with store.engine.connect() as conn:
        return [Notice(*row) for row in conn.execute(stmt)]


def count_by_status(store: AuditStore) -> dict[str, int]:
    """How many rows are in each status (start-up log line, tests)."""
    t = WebhookDelivery
    stmt = select(t.status, func.count()).group_by(t.status)
    with store.engine.connect() as conn:
        return {status: int(n) for status, n in conn.execute(stmt)}


def _move(store: AuditStore, decision_id: str, old: str, new: str, **values: Any) -> int:
    t = WebhookDelivery
    stmt = (
        update(t)
        .where(t.decision_id == decision_id, t.status == old)
        .values(status=new, updated_at=func.now(), **values)
    )
    with store.engine.begin() as conn:
        return conn.execute(stmt).rowcount
