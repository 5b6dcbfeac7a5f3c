"""The audit quarantine: records the database refused for their data, with its error.

A record refused for what it holds would be refused again on every retry, and everything
queued behind it would wait forever; the writer (:mod:`streams.audit.writer`) tries it a
bounded number of times and keeps it here instead, so the trail goes on. One row per
``(kind, record_key)``: a redelivered refusal is stored once. What is stored never trips
the same refusal: text is escaped (:func:`~streams.audit.write_errors.safe_text`) and the
record itself is JSON bytes (``\\u0000`` stays an escape inside them).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from streams.audit.models import QuarantinedRecord
from streams.audit.store import AuditStore
from streams.audit.write_errors import safe_text
from streams.core.events import Decision

if TYPE_CHECKING:
    from streams.wire.avro import DeadLetterRecord, RunWatermark

DECISION, RUN_PROGRESS, DEAD_LETTER = "decision", "run_progress", "dead_letter"


@dataclass(frozen=True, slots=True)
class Quarantined:
    """An audit record the database refused, as the quarantine keeps it."""

    kind: str  # decision, run_progress, dead_letter
    record_key: str  # decision id, run id, or topic:partition:offset
    run_id: str
    payload: bytes  # the record as JSON
    error: str  # what the database answered
    attempts: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the payload as text (it is JSON)."""
        data = dataclasses.asdict(self)
        data["payload"] = self.payload.decode("utf-8", "replace")
        return data


def _json(values: dict[str, Any]) -> bytes:
    # ensure_ascii: NUL and unpaired surrogates become escapes, never raw bytes.
    return json.dumps(values, ensure_ascii=True, default=repr, sort_keys=True).encode()


def for_decision(decision: Decision, error: str, attempts: int) -> Quarantined:
    values = decision.to_dict()
    values["decision_id"] = decision.decision_id
    return Quarantined(
        DECISION, safe_text(decision.decision_id), safe_text(decision.run_id),
        _json(values), safe_text(error), attempts,
    )  # fmt: skip


def for_progress(mark: RunWatermark, error: str, attempts: int) -> Quarantined:
    values = dataclasses.asdict(mark) if dataclasses.is_dataclass(mark) else vars(mark)
    key = f"{mark.run_id}@{mark.seq}"
    return Quarantined(
        RUN_PROGRESS, safe_text(key), safe_text(mark.run_id), _json(dict(values)),
        safe_text(error), attempts,
    )  # fmt: skip


def for_dead_letter(letter: DeadLetterRecord, error: str, attempts: int) -> Quarantined:
    values = {
        "source_topic": letter.source_topic,
        "partition": letter.partition,
        "offset": letter.offset,
        "error": letter.error,
        "key": letter.key.hex() if letter.key is not None else None,
        "payload": letter.payload.hex(),
    }
    key = f"{letter.source_topic}:{letter.partition}:{letter.offset}"
    return Quarantined(DEAD_LETTER, safe_text(key), "", _json(values), safe_text(error), attempts)


def record(store: AuditStore, entry: Quarantined) -> bool:
    """Keep a refused record; False if it was already kept (a redelivery)."""
    dialect = postgresql if store.engine.dialect.name == "postgresql" else sqlite
    stmt = (
        dialect.insert(QuarantinedRecord)
        .values(**dataclasses.asdict(entry))
        .on_conflict_do_nothing(
            index_elements=[QuarantinedRecord.kind, QuarantinedRecord.record_key]
        )
        .returning(QuarantinedRecord.id)
    )
    with store.engine.begin() as conn:
        return conn.execute(stmt).first() is not None


def recent(store: AuditStore, limit: int = 100) -> list[Quarantined]:
    """The most recently quarantined records, newest first."""
    q = QuarantinedRecord
    names = [f.name for f in dataclasses.fields(Quarantined)]
    with Session(store.engine) as session:
        rows = session.scalars(select(q).order_by(q.id.desc()).limit(limit))
        return [Quarantined(**{name: getattr(row, name) for name in names}) for row in rows]


def count(store: AuditStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(QuarantinedRecord)).scalar_one())
