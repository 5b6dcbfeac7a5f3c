"""Incidents in the audit trail (issue 28): idempotent, merged, never reopened; the codec."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streams.audit.incidents import ABANDONED_AFTER_MS, list_incidents, record_incidents
from streams.audit.store import AuditStore
from streams.core.incidents import CLOSED, OPEN, Incident
from streams.wire.errors import CodecError
from streams.wire.incident_codec import (
    decode_incident,
    decode_signal,
    encode_incident,
)

OPENED = Incident(
    incident_id="inc-1",
    signature="abc",
    tool="web_fetch",
    kind="error",
    detail="upstream <n>",
    status=OPEN,
    window_seconds=60,
    opened_at=60_000,
    last_window=60_000,
    runs=("r1", "r2"),
    agents=("a1", "a2"),
)


def test_an_incident_is_recorded_once_and_merged(audit_store: AuditStore) -> None:
    assert record_incidents(audit_store, [OPENED]) == ["inc-1"]
    assert record_incidents(audit_store, [OPENED]) == []  # redelivered: nothing new
    grown = replace(OPENED, runs=("r1", "r3"), last_window=120_000)
    closed = replace(grown, status=CLOSED, closed_at=240_000)
    assert record_incidents(audit_store, [grown, closed]) == []
    record_incidents(audit_store, [OPENED])  # an old open after the close: stays closed
    (stored,) = list_incidents(audit_store)
    assert stored.status == CLOSED and stored.closed_at == 240_000
    assert stored.runs == ("r1", "r2", "r3") and stored.last_window == 120_000
    assert list_incidents(audit_store, open_only=True) == []


def test_open_incidents_are_listed_newest_first(audit_store: AuditStore) -> None:
    later = replace(OPENED, incident_id="inc-2", opened_at=180_000, last_window=180_000)
    record_incidents(audit_store, [OPENED, later])
    assert [i.incident_id for i in list_incidents(audit_store, open_only=True)] == [
        "inc-2",
        "inc-1",
    ]


def test_the_codecs_round_trip_and_refuse_junk() -> None:
    closed = replace(OPENED, status=CLOSED, closed_at=180_000)
    for incident in (OPENED, closed):
        assert decode_incident(encode_incident(incident)) == incident
    with pytest.raises(CodecError):
        decode_incident(b"junk")
    with pytest.raises(CodecError):
        decode_signal(b"{}")


def test_an_incident_no_worker_closed_reads_as_closed_at_its_quiet_windows_end(
    audit_store: AuditStore,
) -> None:
    """A worker that is gone (a demo's, a fleet taken down) closes nothing more: read as of
    a wall-clock time, an incident still open a minute past its quiet window is closed."""
    record_incidents(audit_store, [OPENED])
    quiet_end = OPENED.closes_at
    as_of = quiet_end + ABANDONED_AFTER_MS
    (still,) = list_incidents(audit_store, open_only=True, now_ms=as_of - 1)
    assert still.status == OPEN
    assert list_incidents(audit_store, open_only=True, now_ms=as_of) == []
    (shown,) = list_incidents(audit_store, now_ms=as_of)
    assert (shown.status, shown.closed_at) == (CLOSED, quiet_end)
    (stored,) = list_incidents(audit_store)  # the trail itself is left as the worker wrote it
    assert stored.status == OPEN
