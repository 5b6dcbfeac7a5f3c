"""The worker's web server with ``LOOPGUARD_WEB_TOKEN`` on a running worker (issue 26, item
5): the API and page need the token (bearer or the login cookie), Faust's own routes are gone,
a foreign Host gets 400, and no secret of the database URL shows on /healthz, /status or in
the worker's log."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from services import ENABLED
from test_web import wait_for_web
from web_client import Client

from streams.audit.store import AuditStore
from streams.devtools.embedded_broker import free_port

pytestmark = pytest.mark.integration

TOKEN = "it-web-token-7f3a"
SECRETS = ("qs-secret-db", "qs-secret-key", TOKEN)


def test_token_login_routes_host_and_redaction_on_a_running_worker(
    pipeline_factory, tmp_path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'audit.db'}?password=qs-secret-db&sslkey=qs-secret-key"
    AuditStore(db_url).migrate()
    pipeline = pipeline_factory(db_url, config=ENABLED)
    port = free_port()
    worker = pipeline.start_worker(web_port=port, LOOPGUARD_WEB_TOKEN=TOKEN)
    gateway = pipeline.client()
    try:
        pipeline.wait_ready(gateway)
        wait_for_web(f"http://127.0.0.1:{port}")  # /healthz: open by default
    except Exception:
        print(pipeline.worker_logs())
        raise
    web = Client(port, None)
    bearer = {"Authorization": f"Bearer {TOKEN}"}

    # The token: the API answers 401 without it, a browser is sent to the login form.
    assert web.get("/runs").status == 401
    assert web.get("/runs", headers={"Authorization": "Bearer nope"}).status == 401
    runs = web.get("/runs", headers=bearer)
    assert runs.status == 200 and isinstance(json.loads(runs.body), list)
    page = web.get("/status")
    assert page.status == 303 and page.headers["Location"].startswith("/login?next=")
    assert web.get("/metrics").status == 200  # open by default: Prometheus carries no token

    # The login form: a wrong token is refused, the right one sets the cookie.
    assert web.request("/login", method="POST", body=urlencode({"token": "x"})).status == 401
    login = web.request("/login", method="POST", body=urlencode({"token": TOKEN}))
    assert login.status == 303 and login.headers["Location"] == "/status"
    cookie_header = login.headers["Set-Cookie"]
    assert "HttpOnly" in cookie_header and "SameSite=Strict" in cookie_header
    cookie = cookie_header.split(";", 1)[0]
    status_page = web.get("/status", headers={"Cookie": cookie})
    assert status_page.status == 200 and "password=***" in status_page.body

    # Faust's own routes are gone; loopguard's answer.
    for path in ("/", "/router/", "/table/", "/table/x/", "/graph/", "/assignment/"):
        reply = web.get(path, headers=bearer)
        assert reply.status == 404 and reply.body == "not found\n", path

    # A Host that is not this worker's: 400 in one line, whatever the path.
    for path in ("/healthz", "/runs", "/status"):
        reply = web.get(path, host=f"rebind.example:{port}", headers=bearer)
        assert reply.status == 400 and reply.body.count("\n") == 1

    # Secrets: hidden on /healthz, the status page and in the log.
    health = web.get("/healthz")
    assert "db_url" not in json.loads(health.body)  # no URL at all (issue 40)
    log = worker.log_path.read_text(errors="replace")
    assert "loopguard worker settings" in log and "password=***" in log
    assert "no LOOPGUARD_WEB_TOKEN set" not in log
    for text in (health.body, status_page.body, runs.body, log):
        for secret in SECRETS:
            assert secret not in text
