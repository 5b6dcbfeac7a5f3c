"""The audit trail's operator releases and aborts (issue 43, table ``operator_releases``):
written with the decision the worker published when it applied the command (one row per run
and command, kept once however often it is redelivered), read by ``loopguard history``, the
run page and ``loopguard quality`` (a release is a labelled false stop of the rule it lifted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from streams.audit.models import OperatorReleaseRow, ProcessedEvent
from streams.core.events import ABORT_DETECTOR, RELEASE_DETECTOR, Decision
from streams.core.operator_command import ABORT, RELEASE

COMMAND_OF = {RELEASE_DETECTOR: RELEASE, ABORT_DETECTOR: ABORT}


@dataclass(frozen=True)
class OperatorRelease:
    """One row of ``operator_releases``."""

    release_id: str
    command: str
    scope: str
    run_id: str
    agent_id: str
    calls: int | None
    until_ms: int | None
    reason: str
    released_by: str
    source: str
    requested_at: int
    applied_seq: int
    released_detector: str
    released_action: str
    released_seq: int | None
    decision_id: str

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _int(value: Any) -> int | None:
    """An ``extra`` value as an int (None when absent or not a number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def release_values(decision: Decision) -> dict[str, Any] | None:
    """The ``operator_releases`` row of an operator's decision (None for a detector's)."""
    command = COMMAND_OF.get(decision.detector)
    if command is None:
        return None
    extra = decision.extra
    return {
        "release_id": _text(extra.get("release_id")) or decision.decision_id,
        "command": command,
        "scope": _text(extra.get("scope")) or "run",
        "run_id": decision.run_id,
        "agent_id": decision.agent_id,
        "calls": _int(extra.get("calls")),
        "until_ms": _int(extra.get("until")),
        "reason": decision.reason,
        "released_by": _text(extra.get("released_by")),
        "source": _text(extra.get("source")),
        "requested_at": _int(extra.get("requested_at")) or decision.event_time,
        "applied_seq": decision.seq,
        "released_detector": _text(extra.get("released_detector")),
        "released_action": _text(extra.get("released_action")),
        "released_seq": _int(extra.get("released_seq")),
        "decision_id": decision.decision_id,
    }


def record_releases(
    conn: Connection, insert: Callable[[Any], Any], decisions: Sequence[Decision]
) -> None:
    """Insert the rows of the operators' decisions among ``decisions`` (``insert``: the
    store's dialect INSERT), skipping those already stored."""
    rows = [row for row in map(release_values, decisions) if row is not None]
    if rows:
        stmt = insert(OperatorReleaseRow).on_conflict_do_nothing(
            index_elements=[OperatorReleaseRow.release_id, OperatorReleaseRow.run_id]
        )
        conn.execute(stmt, rows)


def read_releases(
    conn: Connection, run_id: str | None = None, agent_id: str | None = None, limit: int = 200
) -> list[OperatorRelease]:
    """Releases and aborts, oldest first, of one run or one agent (all when neither)."""
    t = OperatorReleaseRow
    stmt = select(t)
    if run_id is not None:
        stmt = stmt.where(t.run_id == run_id)
    if agent_id is not None:
        stmt = stmt.where(t.agent_id == agent_id)
    stmt = stmt.order_by(t.requested_at.desc(), t.id.desc()).limit(limit)
    with Session(conn) as session:
        rows = session.execute(stmt).scalars().all()
        names = OperatorRelease.__dataclass_fields__
        return [OperatorRelease(**{n: getattr(r, n) for n in names}) for r in reversed(rows)]


@dataclass(frozen=True)
class KnownRun:
    """What the trail knows of a run an operator names: its agent, gateway and status."""

    run_id: str
    agent_id: str
    gateway_id: str
    status: str


def known_run(conn: Connection, run_id: str) -> KnownRun | None:
    """The run's progress record, when the trail has one."""
    t = ProcessedEvent
    stmt = select(t.run_id, t.agent_id, t.gateway_id, t.status).where(t.run_id == run_id)
    row = conn.execute(stmt).first()
    if row is None:
        return None
    return KnownRun(row.run_id, row.agent_id, row.gateway_id, row.status)


def active_runs(conn: Connection, agent_id: str, limit: int = 10_000) -> list[KnownRun]:
    """An agent's runs the trail last saw active (``loopguard release --agent``)."""
    t = ProcessedEvent
    stmt = (
        select(t.run_id, t.agent_id, t.gateway_id, t.status)
        .where(t.agent_id == agent_id, t.status == "active")
        .order_by(t.run_id)
        .limit(limit)
    )
    return [KnownRun(r.run_id, r.agent_id, r.gateway_id, r.status) for r in conn.execute(stmt)]
