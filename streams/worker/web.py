"""HTTP API on the worker's Faust web server (``loopguard worker --web-port PORT``).

* ``GET /healthz`` – liveness, plus whether the audit database answers;
* ``GET /runs?agent=&gateway=&detector=&severity=&since=&until=&limit=`` – the same JSON
  as ``loopguard runs --json``;
* ``GET /runs/{run_id}/history`` – the same decisions as ``loopguard history --json``, as
  one JSON list;
* ``GET /status`` – a small HTML page with the most recent loop decisions.

Queries run in a thread (``asyncio.to_thread``) so the event loop that drives the stream
agents never waits on the database.
"""

from __future__ import annotations

import asyncio
import html
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, fields
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

from faust import web

from streams.core.events import Decision

T = TypeVar("T")

RUNS_PARAMS = ("agent", "gateway", "detector", "severity", "since", "until", "limit")
SEVERITIES = ("warning", "critical")
DEFAULT_LIMIT = 50  # as `loopguard runs`
MAX_LIMIT = 10_000
STATUS_LIMIT = 50


class BadRequest(ValueError):
    pass


def summary_dict(summary: Any) -> dict[str, Any]:
    """One ``RunSummary`` exactly as ``loopguard runs --json`` prints it."""
    data = asdict(summary)
    data["worst_action"] = data["worst_action"].value
    return data


def _int_param(query: Any, name: str, default: int | None, low: int, high: int | None) -> Any:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name}: expected a whole number, got {text!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise BadRequest(f"{name}: must be {bound}, got {value}")
    return value


def runs_filters(query: Any) -> dict[str, Any]:
    """``/runs`` query string → ``AuditStore.runs`` keyword arguments (400 on bad input)."""
    unknown = sorted(set(query) - set(RUNS_PARAMS))
    if unknown:
        raise BadRequest(
            f"unknown query parameter {unknown[0]!r} (known: {', '.join(RUNS_PARAMS)})"
        )
    severity = query.get("severity") or None
    if severity is not None and severity not in SEVERITIES:
        raise BadRequest(f"severity: expected one of {', '.join(SEVERITIES)}, got {severity!r}")
    return {
        "agent": query.get("agent") or None,
        "gateway": query.get("gateway") or None,
        "detector": query.get("detector") or None,
        "severity": severity,
        "since_ms": _int_param(query, "since", None, 0, None),
        "until_ms": _int_param(query, "until", None, 0, None),
        "limit": _int_param(query, "limit", DEFAULT_LIMIT, 0, MAX_LIMIT),
    }


def recent_decisions(store: Any, limit: int) -> list[Decision]:
    """The most recently recorded decisions, newest first."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from streams.audit.store import DecisionRow

    names = [f.name for f in fields(Decision)]
    stmt = select(DecisionRow).order_by(DecisionRow.id.desc()).limit(limit)
    with Session(store.engine) as session:
        out = []
        for row in session.scalars(stmt):
            values = {name: getattr(row, name) for name in names}
            values["extra"] = dict(row.extra or {})
            out.append(Decision.from_dict(values))
        return out


def _when(epoch_ms: int) -> str:
    try:
        return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(epoch_ms)


def render_status(decisions: list[Decision], total: int, dead_letters: int, app_id: str) -> str:
    """The ``/status`` page; every value from the audit trail is HTML-escaped."""
    esc = html.escape
    rows = []
    for d in decisions:
        link = f"/runs/{quote(d.run_id, safe='')}/history"
        rows.append(
            "<tr>"
            f"<td>{esc(_when(d.event_time))}</td>"
            f'<td><a href="{esc(link)}">{esc(d.run_id)}</a></td>'
            f"<td>{esc(d.agent_id)}</td><td>{esc(d.gateway_id)}</td>"
            f'<td class="{esc(d.action.value)}">{esc(d.action.value)}</td>'
            f"<td>{esc(d.detector)}</td><td>{esc(d.severity)}</td>"
            f"<td>{esc(d.tool_name)}</td><td>{d.count}</td><td>{d.seq}</td>"
            f"<td>{esc(d.reason)}</td>"
            "</tr>"
        )
    body = "\n".join(rows) or '<tr><td colspan="11">no loop decisions recorded yet</td></tr>'
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="10">
<title>loopguard status</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }}
td.warn {{ color: #a60; }} td.block {{ color: #c40; }}
td.abort {{ color: #c00; font-weight: bold; }}
</style></head>
<body>
<h1>loopguard &ndash; recent loop decisions</h1>
<p>worker {esc(app_id)} &middot; {total} decisions and {dead_letters} dead letters recorded
&middot; generated {generated} &middot; JSON: <a href="/runs">/runs</a></p>
<table>
<tr><th>event time (UTC)</th><th>run</th><th>agent</th><th>gateway</th><th>action</th>
<th>detector</th><th>severity</th><th>tool</th><th>count</th><th>seq</th><th>reason</th></tr>
{body}
</table>
</body></html>
"""


class _Store:
    """One AuditStore per worker, created on first use (the DB may come up after the worker)."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self._store: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._store is None:
                from streams.audit.store import AuditStore

                self._store = AuditStore(self.db_url)
            return self._store

    async def run(self, work: Callable[[Any], T]) -> T:
        return await asyncio.to_thread(lambda: work(self.get()))


def _db_error(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"audit database unavailable: {type(exc).__name__}: {text[:300]}"


def register_views(app: Any, db_url: str) -> None:
    """Add the loopguard pages to a Faust app's web server."""
    from sqlalchemy.exc import SQLAlchemyError

    from streams.settings import redact_url

    store = _Store(db_url)
    started = time.time()

    @app.page("/healthz", name="loopguard-healthz")
    class Healthz(web.View):
        async def get(self, request: web.Request) -> web.Response:
            try:
                await store.run(lambda s: s.decision_count())
                db = "ok"
            except Exception as exc:  # any driver error means "not reachable" here
                db = _db_error(exc)
            return self.json(
                {
                    "status": "ok",
                    "app_id": app.conf.id,
                    "db": db,
                    "db_url": redact_url(db_url),
                    "uptime_seconds": round(time.time() - started, 1),
                }
            )

    @app.page("/runs", name="loopguard-runs")
    class Runs(web.View):
        async def get(self, request: web.Request) -> web.Response:
            try:
                filters = runs_filters(request.query)
            except BadRequest as exc:
                return self.json({"error": str(exc)}, status=400)
            try:
                summaries = await store.run(lambda s: s.runs(**filters))
            except SQLAlchemyError as exc:
                return self.json({"error": _db_error(exc)}, status=503)
            return self.json([summary_dict(s) for s in summaries])

    @app.page("/runs/{run_id}/history", name="loopguard-run-history")
    class RunHistory(web.View):
        async def get(self, request: web.Request, run_id: str) -> web.Response:
            try:
                decisions = await store.run(lambda s: s.history(run_id))
            except SQLAlchemyError as exc:
                return self.json({"error": _db_error(exc)}, status=503)
            return self.json([d.to_dict() for d in decisions])

    @app.page("/status", name="loopguard-status")
    class Status(web.View):
        async def get(self, request: web.Request) -> web.Response:
            try:
                limit = _int_param(request.query, "limit", STATUS_LIMIT, 1, 1000)
            except BadRequest as exc:
                return self.text(str(exc), status=400)

            def page(s: Any) -> str:
                return render_status(
                    recent_decisions(s, limit),
                    s.decision_count(),
                    s.dead_letter_count(),
                    str(app.conf.id),
                )

            try:
                text = await store.run(page)
            except SQLAlchemyError as exc:
                return self.text(_db_error(exc), status=503)
            return self.html(text)
