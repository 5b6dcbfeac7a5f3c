"""Loop incidents in the audit trail (issue 28): idempotent writes and the reads behind
``loopguard incidents``, the status page and the webhook notice.

An incident's records come from one partition of the incidents topic, in order (open, grown
or gone on into a new window, closed), and may be delivered again after a restart: a write
merges the runs and agents it spans, keeps the latest window, and never reopens a closed
incident.

A worker closes an incident once its quiet window has passed; one that is gone for good (a
demo's, a fleet's that was taken down) closes nothing more. So a read as of a wall-clock time
shows an incident still open ``ABANDONED_AFTER_MS`` past its quiet window as closed at the end
of that window: its worker would have closed it, or said it went on, long before.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from streams.audit.models import IncidentRow
from streams.audit.store import AuditStore
from streams.core.incidents import CLOSED, OPEN, Incident, close, merge_members

# An open incident this long past its quiet window has no worker left to close it.
ABANDONED_AFTER_MS = 60_000


def _merged(row: IncidentRow, incident: Incident) -> None:
    row.runs = list(merge_members(tuple(row.runs), incident.runs))
    row.agents = list(merge_members(tuple(row.agents), incident.agents))
    row.last_window = max(row.last_window, incident.last_window)
    if incident.status == CLOSED and row.status != CLOSED:
        row.status, row.closed_at = CLOSED, incident.closed_at
    row.updated_at = func.now()


def record_incidents(store: AuditStore, incidents: Sequence[Incident]) -> list[str]:
    """Write incident records; returns the ids seen for the first time (their opening)."""
    if not incidents:
        return []
    ids = sorted({i.incident_id for i in incidents})
    new: list[str] = []
    with Session(store.engine) as session, session.begin():
        query = select(IncidentRow).where(IncidentRow.incident_id.in_(ids))
        if store.engine.dialect.name == "postgresql":
            query = query.with_for_update()
        rows = {row.incident_id: row for row in session.scalars(query)}
        for incident in incidents:
            row = rows.get(incident.incident_id)
            if row is None:
                row = IncidentRow(**_values(incident))
                session.add(row)
                rows[incident.incident_id] = row
                new.append(incident.incident_id)
            else:
                _merged(row, incident)
    return new


def _values(incident: Incident) -> dict[str, object]:
    values = incident.to_dict()
    values["runs"], values["agents"] = list(incident.runs), list(incident.agents)
    return values


def row_to_incident(row: IncidentRow) -> Incident:
    return Incident(
        incident_id=row.incident_id,
        signature=row.signature,
        tool=row.tool,
        kind=row.kind,
        detail=row.detail,
        status=row.status,
        window_seconds=row.window_seconds,
        opened_at=row.opened_at,
        last_window=row.last_window,
        closed_at=row.closed_at,
        runs=tuple(row.runs),
        agents=tuple(row.agents),
    )


def list_incidents(
    store: AuditStore, open_only: bool = False, limit: int = 100, now_ms: int | None = None
) -> list[Incident]:
    """Incidents, newest opening first; ``open_only``: those not closed yet. With ``now_ms``
    (wall clock, epoch ms) as of then: an abandoned incident (see above) is closed."""
    query = select(IncidentRow).order_by(IncidentRow.opened_at.desc(), IncidentRow.incident_id)
    if open_only:
        query = query.where(IncidentRow.status == OPEN)
        if now_ms is not None:
            quiet_end = IncidentRow.last_window + IncidentRow.window_seconds * 2000
            query = query.where(quiet_end + ABANDONED_AFTER_MS > now_ms)
    with Session(store.engine) as session:
        found = [row_to_incident(row) for row in session.scalars(query.limit(limit))]
    return found if now_ms is None else [as_of(incident, now_ms) for incident in found]


def as_of(incident: Incident, now_ms: int) -> Incident:
    """``incident`` as of ``now_ms``: closed at the end of its quiet window if abandoned."""
    if incident.status == OPEN and now_ms >= incident.closes_at + ABANDONED_AFTER_MS:
        return close(incident)
    return incident


def has_incident_table(store: AuditStore) -> bool:
    """Whether the trail is migrated to 0006 (older trails have no incidents to show)."""
    from sqlalchemy import inspect

    return inspect(store.engine).has_table(IncidentRow.__tablename__)
