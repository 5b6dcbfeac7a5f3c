"""SQL audit trail: every decision, dead letter and run's progress, queryable later.

The stream processor may see the same Kafka message more than once (rebalances, replays),
so every write here is idempotent: replaying a batch never adds a row or moves a run
backwards. The schema is owned by the Alembic migrations in ``migrations/``; this module
never calls ``create_all``, so production and tests run exactly the same DDL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Engine, and_, case, false, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session

from streams.audit.database import migrate
from streams.audit.engines import DEFAULT_URL, create_audit_engine
from streams.audit.models import Base, DeadLetter, DecisionRow, ProcessedEvent, RunUsageRow
from streams.audit.observed import enforced_abort_exists, reported_status
from streams.audit.progress_rows import USAGE_COLUMNS, progress_rows, usage_rows
from streams.audit.releases import record_releases
from streams.core.events import Action, Decision

if TYPE_CHECKING:
    from streams.wire.avro import RunWatermark

_SEVERITY_ORDER = (Action.WARN, Action.BLOCK, Action.ABORT)


@dataclass(frozen=True, slots=True)
class RunProgress:
    """A run's stored high-water mark."""

    run_id: str
    agent_id: str
    gateway_id: str
    last_seq: int
    events: int
    first_event_time: int
    last_event_time: int
    status: str


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One line of ``loopguard runs``: the run's (filtered) decisions plus its progress if known."""

    run_id: str
    agent_id: str
    gateway_id: str
    decisions: int
    warn: int
    block: int
    abort: int
    worst_action: Action
    first_decision_time: int
    last_decision_time: int
    detectors: list[str]
    status: str | None = None  # "aborted (observe only)" when no abort was enforced
    last_seq: int | None = None
    events: int | None = None
    observed: int = 0  # decisions that were observe-only (mode "observe"), of ``decisions``
    worst_observed: bool = False  # no decision at ``worst_action`` was enforced

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: what ``loopguard runs --json`` and the worker's ``/runs`` answer."""
        data = dataclasses.asdict(self)
        data["worst_action"] = self.worst_action.value
        return data


def _decision_values(decision: Decision) -> dict[str, Any]:
    values = decision.to_dict()
    values["decision_id"] = decision.decision_id
    return values


def row_to_decision(row: DecisionRow) -> Decision:
    """The :class:`Decision` a stored row holds (every query that returns decisions uses this)."""
    values = {f.name: getattr(row, f.name) for f in dataclasses.fields(Decision)}
    values["extra"] = dict(row.extra or {})
    return Decision.from_dict(values)


class AuditStore:
    """Idempotent writer and reader for the audit trail."""

    def __init__(self, url: str | URL = DEFAULT_URL, **engine_kwargs: Any) -> None:
        self.url: URL = make_url(url)
        self.engine: Engine = create_audit_engine(self.url, **engine_kwargs)
        self._dialect = self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def migrate(self) -> None:
        migrate(self.url)

    def _insert(self, model: type[Base]) -> Any:
        """Dialect-specific INSERT so we can use ON CONFLICT."""
        if self._dialect == "postgresql":
            return postgresql.insert(model)
        return sqlite.insert(model)

    # -- writes ---------------------------------------------------------------------------

    def record_decisions(self, decisions: Sequence[Decision]) -> int:
        """Insert decisions, skipping any already stored; returns how many were new."""
        if not decisions:
            return 0
        stmt = (
            self._insert(DecisionRow)
            .on_conflict_do_nothing(index_elements=[DecisionRow.decision_id])
            .returning(DecisionRow.id)
        )
        with self.engine.begin() as conn:
            result = conn.execute(stmt, [_decision_values(d) for d in decisions])
            record_releases(conn, self._insert, decisions)  # an operator's (issue 43)
            return len(result.all())

    def record_decision(self, decision: Decision) -> bool:
        """Insert one decision; False if it was already stored."""
        return self.record_decisions([decision]) == 1

    def record_dead_letter(
        self,
        source_topic: str,
        partition: int,
        offset: int,
        error: str,
        payload: bytes,
        key: bytes | None = None,
    ) -> bool:
        """Count a bad message once per (topic, partition, offset); False if already counted."""
        stmt = (
            self._insert(DeadLetter)
            .values(
                source_topic=source_topic,
                partition=partition,
                offset=offset,
                error=error.replace("\x00", "\\x00"),  # PostgreSQL text cannot hold NUL
                payload=payload,
                key=key,
            )
            .on_conflict_do_nothing(
                index_elements=[DeadLetter.source_topic, DeadLetter.partition, DeadLetter.offset]
            )
            .returning(DeadLetter.id)
        )
        with self.engine.begin() as conn:
            return conn.execute(stmt).first() is not None

    def record_progress(self, watermarks: Iterable[RunWatermark]) -> None:
        """Store run progress from the workers' watermarks: one row per run, idempotent and
        monotonic, whatever order and however often they arrive.

        A watermark at a higher seq sets ``last_seq``, ``events`` (its event count) and
        ``last_event_time``; one at the stored seq or beyond sets ``status``; an older one
        (a redelivery, a replay) moves nothing back. ``first_event_time`` is kept from the
        first watermark stored for the run, and the first non-empty agent/gateway id sticks.
        """
        t = ProcessedEvent
        ins = self._insert(ProcessedEvent)
        new = ins.excluded
        advances = new.last_seq > t.last_seq
        upsert = ins.on_conflict_do_update(
            index_elements=[t.run_id],
            set_={
                "agent_id": case((t.agent_id == "", new.agent_id), else_=t.agent_id),
                "gateway_id": case((t.gateway_id == "", new.gateway_id), else_=t.gateway_id),
                "last_seq": case((advances, new.last_seq), else_=t.last_seq),
                "events": case((advances, new.events), else_=t.events),
                "last_event_time": case((advances, new.last_event_time), else_=t.last_event_time),
                "status": case((new.last_seq >= t.last_seq, new.status), else_=t.status),
            },
        )
        marks = list(watermarks)
        if not marks:
            return
        with self.engine.begin() as conn:
            # One row per run (PostgreSQL refuses an upsert that touches a row twice).
            conn.execute(upsert, progress_rows(marks))
            self._record_usage(conn, [m for m in marks if m.has_usage])

    def _record_usage(self, conn: Any, marks: list[RunWatermark]) -> None:
        """A run's usage (issue 28) from its watermarks: the one at the highest seq wins."""
        if not marks:
            return
        u = RunUsageRow
        ins = self._insert(RunUsageRow)
        new = ins.excluded
        advances = new.last_seq >= u.last_seq
        upsert = ins.on_conflict_do_update(
            index_elements=[u.run_id],
            set_={
                name: case((advances, getattr(new, name)), else_=getattr(u, name))
                for name in (*USAGE_COLUMNS, "last_seq")
            },
        )
        conn.execute(upsert, usage_rows(marks))

    def run_usage(self, run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Stored usage of these runs (issue 28), by run id; runs without usage are absent."""
        ids = list(run_ids)
        if not ids:
            return {}
        with Session(self.engine) as session:
            rows = session.scalars(select(RunUsageRow).where(RunUsageRow.run_id.in_(ids)))
            return {row.run_id: {n: getattr(row, n) for n in USAGE_COLUMNS} for row in rows}

    # -- reads ----------------------------------------------------------------------------

    def history(self, run_id: str) -> list[Decision]:
        """All decisions for a run in the order the run produced them."""
        stmt = (
            select(DecisionRow)
            .where(DecisionRow.run_id == run_id)
            .order_by(DecisionRow.seq, DecisionRow.id)
        )
        with Session(self.engine) as session:
            return [row_to_decision(row) for row in session.scalars(stmt)]

    def run_progress(self, run_id: str) -> RunProgress | None:
        """The stored progress of a run, or None while no watermark of it was recorded."""
        with Session(self.engine) as session:
            row = session.get(ProcessedEvent, run_id)
            if row is None:
                return None
            fields = dataclasses.fields(RunProgress)
            return RunProgress(**{f.name: getattr(row, f.name) for f in fields})

    def runs(
        self,
        agent: str | None = None,
        gateway: str | None = None,
        detector: str | None = None,
        severity: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int | None = 100,
        exclude_agents: Sequence[str] = (),
    ) -> list[RunSummary]:
        """Runs that have matching decisions, most recent decision first.

        Every filter applies to decisions (``since_ms`` inclusive, ``until_ms`` exclusive), so
        counts and detectors describe only the matching decisions. ``exclude_agents`` leaves
        out those agents' decisions (``loopguard runs`` hides readiness test loops so).
        """
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        d = DecisionRow
        conds: list[ColumnElement[bool]] = []
        if agent is not None:
            conds.append(d.agent_id == agent)
        if exclude_agents:
            conds.append(d.agent_id.not_in(list(exclude_agents)))
        if gateway is not None:
            conds.append(d.gateway_id == gateway)
        if detector is not None:
            conds.append(d.detector == detector)
        if severity is not None:
            conds.append(d.severity == severity)
        if since_ms is not None:
            conds.append(d.event_time >= since_ms)
        if until_ms is not None:
            conds.append(d.event_time < until_ms)

        def n_action(action: Action, observed: bool = False) -> Any:
            matches = d.action == action.value
            if observed:
                matches = and_(matches, d.enforced.is_(false()))
            return func.sum(case((matches, 1), else_=0))

        last_time = func.max(d.event_time)
        top = (
            select(
                d.run_id,
                func.max(d.agent_id).label("agent_id"),
                func.max(d.gateway_id).label("gateway_id"),
                func.count().label("decisions"),
                n_action(Action.WARN).label("warn"),
                n_action(Action.BLOCK).label("block"),
                n_action(Action.ABORT).label("abort"),
                n_action(Action.WARN, observed=True).label("observed_warn"),
                n_action(Action.BLOCK, observed=True).label("observed_block"),
                n_action(Action.ABORT, observed=True).label("observed_abort"),
                func.min(d.event_time).label("first_time"),
                last_time.label("last_time"),
            )
            .where(*conds)
            .group_by(d.run_id)
            .order_by(last_time.desc(), d.run_id)
            .limit(limit)
            .subquery("top")
        )
        p = ProcessedEvent
        summary_stmt = (
            select(
                top,
                p.status,
                p.last_seq,
                p.events,
                enforced_abort_exists(DecisionRow, top.c.run_id).label("enforced_abort"),
            )
            .outerjoin(p, p.run_id == top.c.run_id)
            .order_by(top.c.last_time.desc(), top.c.run_id)
        )
        detectors_stmt = (
            select(d.run_id, d.detector)
            .where(*conds, d.run_id.in_(select(top.c.run_id)))
            .distinct()
        )
        with self.engine.connect() as conn:
            detectors: dict[str, list[str]] = {}
            for run_id, name in conn.execute(detectors_stmt):
                detectors.setdefault(run_id, []).append(name)
            summaries = []
            for row in conn.execute(summary_stmt):
                counts = {Action.WARN: row.warn, Action.BLOCK: row.block, Action.ABORT: row.abort}
                worst = next(a for a in reversed(_SEVERITY_ORDER) if counts[a])
                observed = {
                    Action.WARN: int(row.observed_warn),
                    Action.BLOCK: int(row.observed_block),
                    Action.ABORT: int(row.observed_abort),
                }
                summaries.append(
                    RunSummary(
                        run_id=row.run_id,
                        agent_id=row.agent_id,
                        gateway_id=row.gateway_id,
                        decisions=row.decisions,
                        warn=int(row.warn),
                        block=int(row.block),
                        abort=int(row.abort),
                        worst_action=worst,
                        first_decision_time=row.first_time,
                        last_decision_time=row.last_time,
                        detectors=sorted(detectors.get(row.run_id, [])),
                        status=reported_status(row.status, bool(row.enforced_abort)),
                        last_seq=row.last_seq,
                        events=row.events,
                        observed=sum(observed.values()),
                        worst_observed=observed[worst] == counts[worst],
                    )
                )
            return summaries

    def decision_count(self) -> int:
        return self._count(DecisionRow)

    def dead_letter_count(self) -> int:
        return self._count(DeadLetter)

    def _count(self, model: type[Base]) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(model)).scalar_one())
