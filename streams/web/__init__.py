"""HTTP views on the worker's Faust web server (``loopguard worker --web-port PORT``).

* ``GET /healthz`` – liveness, whether the audit database answers, plus whatever the
  worker's health provider adds (lag, last event, ...); 503 when it reports a failure;
* ``GET /metrics`` – Prometheus metrics (:mod:`streams.observability.metrics`), text format 0.0.4;
* ``GET /runs?agent=&gateway=&detector=&severity=&since=&until=&limit=`` – the same JSON
  as ``loopguard runs --json``;
* ``GET /runs/{run_id}/history`` – the same decisions as ``loopguard history --json``;
* ``GET /status?agent=&detector=&action=&window=&since=&until=&limit=&refresh=`` – the
  status page: worker and database health, decisions over time by action (an inline SVG
  chart), top agents and tools, and one line per run with its worst decision;
* ``GET /status/run?id=RUN`` – one run's timeline from the audit trail;
* ``GET /static/loopguard/NAME`` – the page's stylesheet, script and icon (package data:
  nothing is loaded from elsewhere).

The runs, chart and timeline read the shared audit trail, so every worker shows the whole
fleet; the worker section is about the worker that serves the page. Every value from the
trail is HTML-escaped, and the HTML carries a Content-Security-Policy that allows only this
server's own stylesheet and script. Queries run in a thread (``asyncio.to_thread``) so the
event loop that drives the stream agents never waits on the database.

Modules: ``params`` (query strings), ``markup`` (shared HTML pieces), ``status_page`` and
``run_page`` (the two pages), ``views`` (the Faust views and :func:`register_views`).
"""

from streams.web.markup import CSP
from streams.web.params import BadRequest, StatusQuery, runs_filters, status_query
from streams.web.run_page import render_run
from streams.web.status_page import render_status
from streams.web.views import HealthProvider, register_views

__all__ = [
    "CSP",
    "BadRequest",
    "HealthProvider",
    "StatusQuery",
    "register_views",
    "render_run",
    "render_status",
    "runs_filters",
    "status_query",
]
