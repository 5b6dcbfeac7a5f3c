"""A batch of watermarks as the rows the audit trail's progress upserts take: one per run.

The workers publish a watermark for every run each guarding batch touched, so an audit batch
(a fifth of a second of the control topic) holds a busy run once per guarding batch. Each
upsert merges a watermark into the stored row by a fixed rule (:meth:`AuditStore.record_progress`);
merging a run's watermarks here first, by the same rule and in their order, gives the row that
upserting them one after the other would leave, whatever is stored, for one row's SQL work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.wire.avro import RunWatermark

# run_usage's columns, as RunWatermark names them (issue 28)
USAGE_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "tool_calls",
    "loop_tokens",
    "loop_cost_usd",
    "loop_calls",
    "saved_tokens",
)


def progress_rows(marks: Iterable[RunWatermark]) -> list[dict[str, Any]]:
    """One processed_events row per run. The upsert's rule: a higher seq moves ``last_seq``,
    ``events`` and ``last_event_time``; one at the highest seq so far sets ``status``; the
    first non-empty agent and gateway ids stick; ``first_event_time`` is the first one's.
    Merged in order, the run's first watermark at its highest seq gives the counts, its last
    one there the status: what the upserts one by one leave against any stored row."""
    rows: dict[str, dict[str, Any]] = {}
    for mark in marks:
        row = rows.get(mark.run_id)
        if row is None:
            rows[mark.run_id] = {
                "run_id": mark.run_id,
                "agent_id": mark.agent_id,
                "gateway_id": mark.gateway_id,
                "last_seq": mark.seq,
                "events": mark.event_count,
                "first_event_time": mark.event_time,
                "last_event_time": mark.event_time,
                "status": mark.status,
            }
            continue
        if not row["agent_id"]:
            row["agent_id"] = mark.agent_id
        if not row["gateway_id"]:
            row["gateway_id"] = mark.gateway_id
        if mark.seq >= row["last_seq"]:
            row["status"] = mark.status
        if mark.seq > row["last_seq"]:
            row["last_seq"] = mark.seq
            row["events"] = mark.event_count
            row["last_event_time"] = mark.event_time
    return list(rows.values())


def usage_rows(marks: Iterable[RunWatermark]) -> list[dict[str, Any]]:
    """One run_usage row per run: its last watermark at its highest seq (the upsert's rule,
    a watermark at the stored seq or beyond wins)."""
    rows: dict[str, dict[str, Any]] = {}
    for mark in marks:
        row = rows.get(mark.run_id)
        if row is None or mark.seq >= row["last_seq"]:
            usage = {name: getattr(mark, name) for name in USAGE_COLUMNS}
            rows[mark.run_id] = {"run_id": mark.run_id, "last_seq": mark.seq, **usage}
    return list(rows.values())
