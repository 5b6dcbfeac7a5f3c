"""The audit trail's tables as SQLAlchemy 2.0 typed models (``Mapped[...]``).

The schema itself is owned by the Alembic migrations in ``migrations/`` (loopguard never
calls ``create_all``): these classes describe the tables the migrations create.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    func,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

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


class ConfigChangeRow(Base):
    """One change of the guard's config (a config-topic record, a CLI change, the worker's
    file at start or reload), with the versions around it and its sender as far as Kafka can
    tell (``streams.audit.config_changes``). ``change_id`` is unique: a replayed record, or
    the same file loaded by every worker, is one row."""

    __tablename__ = "config_changes"
    __table_args__ = (
        UniqueConstraint("change_id", name="uq_config_changes_change_id"),
        Index("ix_config_changes_agent_key", "agent_key"),
        Index("ix_config_changes_changed_at", "changed_at"),
    )

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    change_id: Mapped[str] = mapped_column(String)
    source: Mapped[str] = mapped_column(String(16))  # topic, cli, file
    action: Mapped[str] = mapped_column(String(16))  # set, removed, refused, loaded
    agent_key: Mapped[str] = mapped_column(String)  # agent id, "*" or "(file)"
    value: Mapped[str | None] = mapped_column(Text, nullable=True)  # the JSON block; None: removed
    error: Mapped[str] = mapped_column(Text, server_default="")  # why a worker refused it
    version_before: Mapped[str] = mapped_column(String, server_default="")
    version_after: Mapped[str] = mapped_column(String, server_default="")
    disables: Mapped[bool] = mapped_column(Boolean, server_default=false())  # off/observe for *
    # the canonical loops it no longer stops (streams.core.config_canary); "": none
    weakened: Mapped[str] = mapped_column(Text, server_default="")
    principal: Mapped[str] = mapped_column(String, server_default="")
    client_id: Mapped[str] = mapped_column(String, server_default="")
    sender_user: Mapped[str] = mapped_column(String, server_default="")
    sender_host: Mapped[str] = mapped_column(String, server_default="")
    topic: Mapped[str] = mapped_column(String, server_default="")
    partition: Mapped[int | None] = mapped_column(Integer, nullable=True)
    offset: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    changed_at: Mapped[int] = mapped_column(BigInteger)  # epoch ms: record timestamp or load
    recorded_by: Mapped[str] = mapped_column(String, server_default="")  # worker host
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class QuarantinedRecord(Base):
    """An audit record the database refused for its data (after a bounded number of tries),
    with the database's error, so the trail goes on past it (``streams.audit.writer``).
    ``(kind, record_key)`` is unique: a redelivered refusal is one row."""

    __tablename__ = "audit_quarantine"
    __table_args__ = (
        UniqueConstraint("kind", "record_key", name="uq_audit_quarantine_kind_record_key"),
    )

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32))  # decision, run_progress, dead_letter
    record_key: Mapped[str] = mapped_column(String)  # decision id, run id, topic:partition:offset
    run_id: Mapped[str] = mapped_column(String, server_default="")
    payload: Mapped[bytes] = mapped_column(LargeBinary)  # the record as JSON (NUL kept escaped)
    error: Mapped[str] = mapped_column(Text)  # what the database answered
    attempts: Mapped[int] = mapped_column(Integer)
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class IncidentRow(Base):
    """A loop incident (issue 28, :class:`streams.core.incidents.Incident`): one signature
    shared by many runs within a window; written idempotently from the incidents topic
    (``streams.audit.incidents``: runs merged, a close never reopened)."""

    __tablename__ = "incidents"
    __table_args__ = (
        Index("ix_incidents_status", "status"),
        Index("ix_incidents_opened_at", "opened_at"),
    )

    incident_id: Mapped[str] = mapped_column(String, primary_key=True)
    signature: Mapped[str] = mapped_column(String)
    tool: Mapped[str] = mapped_column(String)
    kind: Mapped[str] = mapped_column(String(16))  # error | args
    detail: Mapped[str] = mapped_column(Text)  # the normalised error or the args hash
    status: Mapped[str] = mapped_column(String(16))  # open | closed
    window_seconds: Mapped[int] = mapped_column(Integer)
    opened_at: Mapped[int] = mapped_column(BigInteger)  # epoch ms, event time
    last_window: Mapped[int] = mapped_column(BigInteger)
    closed_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    runs: Mapped[list[str]] = mapped_column(JSON)
    agents: Mapped[list[str]] = mapped_column(JSON)
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class RunUsageRow(Base):
    """What a run's model turns cost (issue 28), from the workers' watermarks of runs whose
    gateway reports usage: totals, the part from the run's first loop decision on, and the
    estimate of what stopping the loop saved (``streams.core.usage``). Monotonic per run like
    ``processed_events``: a watermark at a lower seq never moves it back."""

    __tablename__ = "run_usage"

    run_id: Mapped[str] = mapped_column(String, primary_key=True)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    input_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    cost_usd: Mapped[float] = mapped_column(Float, server_default="0")
    tool_calls: Mapped[int] = mapped_column(BigInteger, server_default="0")
    loop_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    loop_cost_usd: Mapped[float] = mapped_column(Float, server_default="0")
    loop_calls: Mapped[int] = mapped_column(BigInteger, server_default="0")
    saved_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")


class OperatorReleaseRow(Base):
    """An operator's release or abort of a run (issue 43, ``loopguard release``, the run
    page's buttons, a held call's webhook), as the worker applied it: who and why, the window
    of warnings only it opened, and the stop it lifted (rule, action, seq): labels for
    ``loopguard quality``. ``(release_id, run_id)`` is unique: an ``--agent`` release is one
    row per run, a redelivered one is kept once."""

    __tablename__ = "operator_releases"
    __table_args__ = (
        UniqueConstraint("release_id", "run_id", name="uq_operator_releases_release_id_run_id"),
        Index("ix_operator_releases_run_id", "run_id"),
        Index("ix_operator_releases_agent_id", "agent_id"),
        Index("ix_operator_releases_requested_at", "requested_at"),
    )

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    release_id: Mapped[str] = mapped_column(String)
    command: Mapped[str] = mapped_column(String(16))  # release | abort
    scope: Mapped[str] = mapped_column(String(16))  # run | agent (loopguard release --agent)
    run_id: Mapped[str] = mapped_column(String)
    agent_id: Mapped[str] = mapped_column(String, server_default="")
    calls: Mapped[int | None] = mapped_column(Integer, nullable=True)  # warnings only for N calls
    until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # ... or until then
    reason: Mapped[str] = mapped_column(Text, server_default="")
    released_by: Mapped[str] = mapped_column(String, server_default="")
    source: Mapped[str] = mapped_column(String(16), server_default="")  # cli | web | hold
    requested_at: Mapped[int] = mapped_column(BigInteger)  # epoch ms, the command's time
    applied_seq: Mapped[int] = mapped_column(BigInteger)  # the run's seq it applied after
    released_detector: Mapped[str] = mapped_column(String, server_default="")  # the stop lifted
    released_action: Mapped[str] = mapped_column(String(16), server_default="")  # block | abort
    released_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    decision_id: Mapped[str] = mapped_column(String, server_default="")  # its decision's
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
