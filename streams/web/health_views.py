"""The guard role's web server (``loopguard worker --role guard --web-port``): ``/healthz`` and
``/metrics`` only. A guard holds no audit trail, so nothing here touches the database; the
status page, the JSON API and the database probe are the audit role's
(:func:`streams.web.views.register_views`)."""

from __future__ import annotations

import time
from typing import Any

from faust import web

from streams.observability.metrics import CONTENT_TYPE, WorkerMetrics
from streams.web import access as web_access
from streams.web.access import WebAccess
from streams.web.status_page import HEALTHY
from streams.web.views import HealthProvider, call_health


def register_health_views(
    app: Any,
    metrics: WorkerMetrics,
    health: HealthProvider,
    *,
    access: WebAccess | None = None,
) -> None:
    """``/healthz`` (the worker's ``health`` fields; 503 unless ok or degraded) and
    ``/metrics``, behind the same Host and token checks as the full server."""
    web_access.install(app, access if access is not None else WebAccess())
    started = time.time()

    @app.page("/healthz", name="loopguard-healthz")
    class Healthz(web.View):
        async def get(self, request: web.Request) -> web.Response:
            body: dict[str, Any] = {
                "status": "ok",
                "app_id": app.conf.id,
                "uptime_seconds": round(time.time() - started, 1),
            }
            body.update(await call_health(health))
            return self.json(body, status=200 if body["status"] in HEALTHY else 503)

    @app.page("/metrics", name="loopguard-metrics")
    class Metrics(web.View):
        async def get(self, request: web.Request) -> web.Response:
            return self.bytes(metrics.render(), headers={"Content-Type": CONTENT_TYPE})
