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
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    DateTime,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    and_,
    case,
    create_engine,
    event,
    false,
    func,
    select,
    true,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import migrations
from streams.audit.observed import enforced_abort_exists, reported_status
from streams.core.events import Action, Decision

if TYPE_CHECKING:
    from streams.wire.avro import RunWatermark

DEFAULT_URL = "sqlite:///loopguard-data/audit.db"
# Works from any cwd, for editable installs and for wheels (migrations/ ships next to streams/).
MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent

# Constant statements only: PRAGMA cannot take bound parameters.
_SQLITE_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA busy_timeout=5000")
_SUPPORTED_DIALECTS = ("sqlite", "postgresql")
_SEVERITY_ORDER = (Action.WARN, Action.BLOCK, Action.ABORT)

# sqlite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
_Id = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base; the naming convention keeps future migrations' constraint names stable."""

    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class DecisionRow(Base):
    """One emitted decision; ``decision_id`` is unique so redelivery cannot duplicate it."""

    __tablename__ = "decisions"
    __table_args__ = (
        UniqueConstraint("decision_id", name="uq_decisions_decision_id"),
        Index("ix_decisions_run_id_seq", "run_id", "seq"),
        Index("ix_decisions_agent_id", "agent_id"),
        Index("ix_decisions_gateway_id", "gateway_id"),
        Index("ix_decisions_detector", "detector"),
        Index("ix_decisions_event_time", "event_time"),
    )

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    decision_id: Mapped[str] = mapped_column(String)
    run_id: Mapped[str] = mapped_column(String)
    agent_id: Mapped[str] = mapped_column(String)
    gateway_id: Mapped[str] = mapped_column(String)
    seq: Mapped[int] = mapped_column(BigInteger)
    event_time: Mapped[int] = mapped_column(BigInteger)  # epoch ms, from the gateway
    action: Mapped[str] = mapped_column(String(16))
    detector: Mapped[str] = mapped_column(String)
    severity: Mapped[str] = mapped_column(String(16))
    count: Mapped[int] = mapped_column(Integer)
    tool_name: Mapped[str] = mapped_column(String)
    reason: Mapped[str] = mapped_column(Text)
    args_hash: Mapped[str] = mapped_column(String)
    result_hash: Mapped[str] = mapped_column(String)
    paired_tool_name: Mapped[str] = mapped_column(String)
    error_code: Mapped[str] = mapped_column(String)
    config_version: Mapped[str] = mapped_column(String)
    # False for an observe-only decision (mode "observe"); rows from before 0003 read true.
    enforced: Mapped[bool] = mapped_column(Boolean, server_default=true())
    extra: Mapped[dict[str, Any]] = mapped_column(JSON)  # json, not jsonb: keeps floats verbatim
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class DeadLetter(Base):
    """Input we could not process, kept so bad data is counted rather than silently dropped."""

    __tablename__ = "dead_letters"
    __table_args__ = (
        UniqueConstraint(
            "source_topic", "partition", "offset", name="uq_dead_letters_source_position"
        ),
    )

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    source_topic: Mapped[str] = mapped_column(String)
    partition: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    error: Mapped[str] = mapped_column(Text)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    key: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class ProcessedEvent(Base):
    """Per-run progress (from the workers' RunWatermarks), so ``loopguard runs`` can show how far
    each run got: its status, the last seq processed and how many events it applied."""

    __tablename__ = "processed_events"

    run_id: Mapped[str] = mapped_column(String, primary_key=True)
    agent_id: Mapped[str] = mapped_column(String)
    gateway_id: Mapped[str] = mapped_column(String)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    events: Mapped[int] = mapped_column(BigInteger)
    first_event_time: Mapped[int] = mapped_column(BigInteger)
    last_event_time: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(32))


class WebhookDelivery(Base):
    """One webhook notification of a block or abort, keyed by its decision id: the outbox that
    lets a restarted worker finish what was queued and never send a decision twice
    (``streams.audit.webhook_outbox``; ``status``: pending, sending, sent, failed, dropped)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_status", "status"),)

    decision_id: Mapped[str] = mapped_column(String, primary_key=True)
    run_id: Mapped[str] = mapped_column(String)
    agent_id: Mapped[str] = mapped_column(String)
    action: Mapped[str] = mapped_column(String(16))
    body: Mapped[str] = mapped_column(Text)  # the JSON posted; the URL (a secret) is not kept
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    last_error: Mapped[str] = mapped_column(Text, server_default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


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


def create_audit_engine(url: str | URL = DEFAULT_URL, **kwargs: Any) -> Engine:
    """Engine with the audit-trail conventions; shared by the store and ``migrations/env.py``.

    For sqlite files the parent directory is created (so the default works on a fresh
    checkout) and WAL plus a busy timeout are set, letting the CLI read while the
    processor writes.
    """
    url = make_url(url)
    if url.get_backend_name() not in _SUPPORTED_DIALECTS:
        raise ValueError(f"unsupported audit database {url.get_backend_name()!r}")
    is_sqlite = url.get_backend_name() == "sqlite"
    database = url.database or ""
    if is_sqlite and database not in ("", ":memory:") and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **kwargs)
    if is_sqlite:
        event.listen(engine, "connect", _sqlite_on_connect)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in _SQLITE_PRAGMAS:
            cursor.execute(pragma)
    finally:
        cursor.close()


def alembic_config(url: str | URL = DEFAULT_URL) -> Config:
    """Alembic config pointing at the packaged migrations, independent of cwd and alembic.ini."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    rendered = make_url(url).render_as_string(hide_password=False)
    cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))  # configparser escape
    return cfg


def migrate(url: str | URL = DEFAULT_URL) -> None:
    """Bring the schema to the latest revision (``alembic upgrade head``)."""
    command.upgrade(alembic_config(url), "head")


def _decision_values(decision: Decision) -> dict[str, Any]:
    values = decision.to_dict()
    values["decision_id"] = decision.decision_id
    return values


def row_to_decision(row: DecisionRow) -> Decision:
    """The :class:`Decision` a stored row holds (every query that returns decisions uses this)."""
    values = {f.name: getattr(row, f.name) for f in dataclasses.fields(Decision)}
    values["extra"] = dict(row.extra or {})
    return Decision.from_dict(values)


def _in_waves(marks: Iterable[RunWatermark]) -> list[list[dict[str, Any]]]:
    """Split rows so no run appears twice in one statement, keeping each run's order.

    PostgreSQL refuses an ON CONFLICT DO UPDATE that touches one row twice, which a
    multi-row VALUES batch (psycopg2's insertmanyvalues) would do for a repeated run.
    """
    waves: list[list[dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for mark in marks:
        n = seen.get(mark.run_id, 0)
        seen[mark.run_id] = n + 1
        if n == len(waves):
            waves.append([])
        waves[n].append(
            {
                "run_id": mark.run_id,
                "agent_id": mark.agent_id,
                "gateway_id": mark.gateway_id,
                "last_seq": mark.seq,
                "events": mark.event_count,
                "first_event_time": mark.event_time,
                "last_event_time": mark.event_time,
                "status": mark.status,
            }
        )
    return waves


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
        with self.engine.begin() as conn:
            for wave in _in_waves(watermarks):
                conn.execute(upsert, wave)

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
    ) -> list[RunSummary]:
        """Runs that have matching decisions, most recent decision first.

        Every filter applies to decisions (``since_ms`` inclusive, ``until_ms`` exclusive), so
        counts and detectors describe only the matching decisions.
        """
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        d = DecisionRow
        conds: list[ColumnElement[bool]] = []
        if agent is not None:
            conds.append(d.agent_id == agent)
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
