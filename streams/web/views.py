"""The Faust web views; queries run in a thread so the stream agents' loop never waits on SQL."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any, TypeVar

from faust import web
from sqlalchemy.exc import SQLAlchemyError

from streams.audit import queries
from streams.observability.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from streams.observability.metrics import WorkerMetrics
from streams.web import access as web_access
from streams.web.access import WebAccess
from streams.web.login import register_login
from streams.web.markup import HTML_HEADERS, STATIC_PREFIX
from streams.web.operator_views import (
    SendCommands,
    load_releases,
    operator_section,
    register_operator_views,
)
from streams.web.params import BadRequest, runs_filters, status_query, summary_dict
from streams.web.run_page import render_run
from streams.web.status_page import HEALTHY, load_status, render_status

T = TypeVar("T")
ViewMethod = Callable[..., Awaitable[web.Response]]
HealthProvider = Callable[[], Mapping[str, Any]]
DB_PROBE_SECONDS = 2.0  # /healthz's database probe waits no longer

STATIC_TYPES = {
    ".css": "text/css",
    ".js": "text/javascript",
    ".svg": "image/svg+xml",
}


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


def answers_errors(*, as_json: bool) -> Callable[[ViewMethod], ViewMethod]:
    """A view method whose bad parameters (:class:`BadRequest`) answer 400 and whose
    unreachable audit database answers 503, in one line: ``{"error": ...}`` for a JSON view,
    plain text for a page; never a traceback's 500."""

    def decorate(method: ViewMethod) -> ViewMethod:
        @functools.wraps(method)
        async def answered(view: web.View, *args: Any, **kwargs: Any) -> web.Response:
            try:
                return await method(view, *args, **kwargs)
            except BadRequest as exc:
                return _error(view, str(exc), 400, as_json=as_json)
            except SQLAlchemyError as exc:
                return _error(view, _db_error(exc), 503, as_json=as_json)

        return answered

    return decorate


def _error(view: web.View, message: str, status: int, *, as_json: bool) -> web.Response:
    if as_json:
        return view.json({"error": message}, status=status)
    return view.text(message, status=status)


async def call_health(health: HealthProvider | None) -> dict[str, Any]:
    """The provider's fields; a provider that fails makes the worker unhealthy, not the view."""
    if health is None:
        return {}
    try:
        result = health()
        if inspect.isawaitable(result):
            result = await result
        return dict(result or {})
    except Exception as exc:  # noqa: BLE001 - report, never crash the health check
        return {"status": "error", "health_error": f"{type(exc).__name__}: {exc}"[:300]}


def static_asset(name: str) -> tuple[bytes, str] | None:
    """A file shipped in ``streams/web/static`` and its content type, or None."""
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or "\\" in name or name.startswith(".") or suffix not in STATIC_TYPES:
        return None
    resource = resources.files("streams.web").joinpath("static", name)
    if not resource.is_file():
        return None
    return resource.read_bytes(), STATIC_TYPES[suffix]


def register_views(
    app: Any,
    db_url: str,
    metrics: WorkerMetrics | None = None,
    *,
    health: HealthProvider | None = None,
    clock_ms: Callable[[], int] | None = None,
    access: WebAccess | None = None,
    send_commands: SendCommands | None = None,
) -> WorkerMetrics:
    """Add the loopguard pages to a Faust app's web server; returns the metrics it serves.

    ``metrics``: the worker's :class:`WorkerMetrics` (a fresh, idle one if not given).
    ``health``: called on every ``/healthz`` and status page; returns fields merged into
    ``/healthz``'s JSON (e.g. ``{"status": "degraded", "lag": 1200}``). ``status`` other
    than ``ok``/``degraded`` makes ``/healthz`` answer 503; a provider that raises does too.
    ``clock_ms``: wall clock in epoch ms that time windows ("15m") count back from; tests
    pin it so a window does not drift past fixtures during a long run.
    ``access``: Host names, token (:mod:`streams.web.access`); open to localhost if not given.
    ``send_commands``: publishes an operator's release or abort (issue 43, the run page's
    forms, :mod:`streams.web.operator_views`); without it those endpoints answer 503.
    Only views named ``loopguard-*`` are served: Faust's built-in routes answer 404.
    """
    from streams.settings import redact_url

    store = _Store(db_url)
    started = time.time()
    now = clock_ms if clock_ms is not None else (lambda: int(time.time() * 1000))
    served = metrics if metrics is not None else WorkerMetrics()
    shown_url = redact_url(db_url)
    checks = access if access is not None else WebAccess()
    web_access.install(app, checks)
    register_login(app, checks)
    register_operator_views(app, store.run, checks, send_commands)

    async def db_state() -> str:
        try:
            # A database that does not answer must not hold a health check (issue 26).
            await asyncio.wait_for(store.run(lambda s: s.decision_count()), DB_PROBE_SECONDS)
            return "ok"
        except TimeoutError:
            return f"audit database unavailable: no answer within {DB_PROBE_SECONDS:.0f} s"
        except Exception as exc:  # any driver error means "not reachable" here
            return _db_error(exc)

    @app.page("/healthz", name="loopguard-healthz")
    class Healthz(web.View):
        async def get(self, request: web.Request) -> web.Response:
            body: dict[str, Any] = {
                "status": "ok",
                "app_id": app.conf.id,
                "db": await db_state(),  # no URL: /healthz is open to probes (issue 40)
                "uptime_seconds": round(time.time() - started, 1),
            }
            body.update(await call_health(health))
            if body["status"] == "ok" and body["db"] != "ok":
                # Decisions still flow while the audit trail waits: degraded, not down.
                body["status"] = "degraded"
            return self.json(body, status=200 if body["status"] in HEALTHY else 503)

    @app.page("/metrics", name="loopguard-metrics")
    class Metrics(web.View):
        async def get(self, request: web.Request) -> web.Response:
            return self.bytes(served.render(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    @app.page("/runs", name="loopguard-runs")
    class Runs(web.View):
        @answers_errors(as_json=True)
        async def get(self, request: web.Request) -> web.Response:
            filters = runs_filters(request.query)
            lines = await store.run(lambda s: _runs_with_usage(s, filters))
            return self.json(lines)

    @app.page("/runs/{run_id}/history", name="loopguard-run-history")
    class RunHistory(web.View):
        @answers_errors(as_json=True)
        async def get(self, request: web.Request, run_id: str) -> web.Response:
            decisions = await store.run(lambda s: s.history(run_id))
            return self.json([d.to_dict() for d in decisions])

    @app.page("/status", name="loopguard-status")
    class Status(web.View):
        @answers_errors(as_json=False)
        async def get(self, request: web.Request) -> web.Response:
            q = status_query(request.query)
            now_ms = now()
            data, error = None, None
            try:
                data = await store.run(lambda s: load_status(s, q, now_ms))
            except SQLAlchemyError as exc:
                error = _db_error(exc)
            text = render_status(
                data,
                q,
                app_id=str(app.conf.id),
                db_url=shown_url,
                db_error=error,
                snapshot=served.snapshot() if metrics is not None else None,
                health=await call_health(health),
                now_ms=now_ms,
            )
            return self.html(text, status=503 if error else 200, headers=dict(HTML_HEADERS))

    @app.page("/status/run", name="loopguard-status-run")
    class StatusRun(web.View):
        @answers_errors(as_json=False)
        async def get(self, request: web.Request) -> web.Response:
            run_id = request.query.get("id")
            if not run_id:
                raise BadRequest("id: the run id is required (/status/run?id=RUN)")
            timeline = await store.run(lambda s: queries.run_timeline(s, run_id))
            releases = await store.run(lambda s: load_releases(s, run_id))
            known = timeline.decisions or timeline.progress is not None
            active = timeline.progress is not None and timeline.progress.status == "active"
            enabled = bool(checks.token) and send_commands is not None
            controls = operator_section(run_id, releases, active, enabled)
            text = render_run(timeline, app_id=str(app.conf.id), now_ms=now(), controls=controls)
            return self.html(text, status=200 if known else 404, headers=dict(HTML_HEADERS))

    @app.page(STATIC_PREFIX + "{name}", name="loopguard-static")
    class Static(web.View):
        async def get(self, request: web.Request, name: str) -> web.Response:
            asset = static_asset(name)
            if asset is None:
                return self.text("not found", status=404)
            data, content_type = asset
            return self.bytes(
                data,
                content_type=content_type,
                headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
            )

    return served


def _runs_with_usage(store: Any, filters: dict[str, Any]) -> list[dict[str, Any]]:
    """``/runs``: the runs and their usage in one thread hop, as ``loopguard runs --json``."""
    summaries = store.runs(**filters)
    usage = store.run_usage(s.run_id for s in summaries)
    return [summary_dict(s, usage.get(s.run_id)) for s in summaries]
