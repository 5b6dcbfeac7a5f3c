"""Who the worker's web server answers (issue 26, item 5), on the real Faust views with every
built-in blueprint applied: Faust's own routes are gone, a Host that is not ours gets 400, the
token guards the page and API (bearer header or login cookie), /healthz and /metrics apart,
and no secret of the database URL shows."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from web_client import Client, worker_web

from streams.audit.store import AuditStore
from streams.web.access import COOKIE, SESSION_SECONDS, WebAccess, parse_hosts, session_value

TOKEN = "s3cret-web-token"


@pytest.fixture
def db_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    AuditStore(url).migrate()
    return url


@pytest.fixture
def open_web(db_url: str) -> Iterator[Client]:
    with worker_web(db_url) as client:
        yield client


@pytest.fixture
def guarded(db_url: str) -> Iterator[Client]:
    with worker_web(db_url, access=WebAccess(token=TOKEN)) as client:
        yield client


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def login(client: Client, token: str = TOKEN, next_path: str = "/status") -> str:
    """POST the login form; the cookie it sets (``name=value``)."""
    reply = client.request(
        "/login", method="POST", body=urlencode({"token": token, "next": next_path})
    )
    assert reply.status == 303, reply.body
    assert reply.headers["Location"] == next_path
    cookie = reply.headers["Set-Cookie"]
    return cookie.split(";", 1)[0]


# ------------------------------------------------------------------ Faust's own routes


FAUST_ROUTES = [
    "/",
    "/router/",
    "/router/topics",
    "/router/loopguard-runs/",
    "/router/loopguard-runs/k/",
    "/table/",
    "/table/runs/",
    "/table/runs/k/",
    "/graph/",
    "/assignment/",
    "/performance/",
]


@pytest.mark.parametrize("path", FAUST_ROUTES)
def test_faust_built_in_routes_are_gone(open_web: Client, path: str) -> None:
    reply = open_web.get(path)
    assert reply.status == 404, (path, reply.body)
    assert reply.body == "not found\n"


def test_every_built_in_route_is_covered(open_web: Client) -> None:
    """Each route Faust's blueprints registered (the worker applies them) answers 404."""
    ours = {p for p, v in open_web.app.web.views.items() if v.view_name.startswith("loopguard-")}
    faust_routes = set(open_web.app.web.views) - ours
    assert faust_routes  # the blueprints are there ...
    for pattern in faust_routes:  # ... and none of them answers
        path = pattern.replace("{name}", "x").replace("{key}", "k")
        assert open_web.get(path).status == 404, pattern


def test_loopguard_routes_still_answer(open_web: Client) -> None:
    for path in ("/healthz", "/metrics", "/runs", "/status", "/static/loopguard/status.css"):
        assert open_web.get(path).status == 200, path


# ------------------------------------------------------------------ the Host header


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:6066", "localhost.evil.example", "a:b:c", "[::1"]
)
def test_a_host_that_is_not_ours_gets_400(open_web: Client, host: str) -> None:
    for path in ("/status", "/runs", "/healthz", "/metrics", "/router/"):
        reply = open_web.get(path, host=host)
        assert reply.status == 400, (host, path)
        assert reply.body.count("\n") == 1 and "LOOPGUARD_WEB_ALLOWED_HOSTS" in reply.body


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST:1", "localhost.", "127.0.0.1:6066", "[::1]:6066", "10.1.2.3"]
)
def test_local_names_and_addresses_are_answered(open_web: Client, host: str) -> None:
    assert open_web.get("/healthz", host=host).status == 200


def test_configured_host_names(db_url: str) -> None:
    hosts = parse_hosts("status.example.com, .corp.example", "127.0.0.1")
    with worker_web(db_url, access=WebAccess(allowed_hosts=hosts)) as client:
        assert client.get("/healthz", host="status.example.com").status == 200
        assert client.get("/healthz", host="a.corp.example:443").status == 200
        assert client.get("/healthz", host="corp.example").status == 200
        assert client.get("/healthz", host="localhost").status == 400  # not listed any more
        assert client.get("/healthz", host="xcorp.example").status == 400
    with worker_web(db_url, access=WebAccess(allowed_hosts=parse_hosts("*", ""))) as client:
        assert client.get("/healthz", host="anything.example").status == 200


def test_default_hosts_follow_the_bind_address() -> None:
    assert parse_hosts("", "10.0.0.5") == ("localhost", "127.0.0.1", "::1", "10.0.0.5")
    assert parse_hosts("", "status.internal")[-1] == "status.internal"
    assert len(parse_hosts("", "0.0.0.0")) == 4  # plus this machine's own name


# ------------------------------------------------------------------ the token


def test_without_a_token_everything_is_open_and_the_log_says_so(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="loopguard.web"), worker_web(db_url) as client:
        assert client.get("/runs").status == 200
        assert client.get("/status").status == 200
    lines = [r.getMessage() for r in caplog.records if "LOOPGUARD_WEB_TOKEN" in r.getMessage()]
    assert len(lines) == 1 and "no LOOPGUARD_WEB_TOKEN set" in lines[0]


def test_with_a_token_the_log_says_nothing_about_it(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="loopguard.web")
    with worker_web(db_url, access=WebAccess(token=TOKEN)):
        pass
    assert not [r for r in caplog.records if "LOOPGUARD_WEB_TOKEN" in r.getMessage()]
    assert TOKEN not in caplog.text


@pytest.mark.parametrize("path", ["/runs", "/runs/r1/history", "/status", "/status/run?id=r1"])
def test_the_api_and_page_need_the_token(guarded: Client, path: str) -> None:
    reply = guarded.get(path, headers={"Authorization": "Bearer"})
    assert reply.status == 401
    assert reply.headers["WWW-Authenticate"] == 'Bearer realm="loopguard"'
    assert reply.body.count("\n") == 1
    assert guarded.get(path, headers=bearer("wrong")).status == 401
    assert guarded.get(path, headers=bearer(TOKEN + "x")).status == 401
    assert guarded.get(path, headers={"Authorization": f"Basic {TOKEN}"}).status == 401
    assert guarded.get(path, headers=bearer()).status in (200, 404)  # 404: no such run


def test_a_browser_without_credentials_is_sent_to_the_login_form(guarded: Client) -> None:
    reply = guarded.get("/status?window=1h")
    assert reply.status == 303
    assert reply.headers["Location"] == "/login?next=%2Fstatus%3Fwindow%3D1h"
    assert guarded.get("/runs").status == 401  # the API answers, it does not redirect


def test_healthz_and_metrics_are_open_by_default(guarded: Client) -> None:
    assert guarded.get("/healthz").status == 200
    assert guarded.get("/metrics").status == 200
    assert guarded.get("/static/loopguard/status.css").status == 200


def test_healthz_and_metrics_can_need_the_token(db_url: str) -> None:
    access = WebAccess(token=TOKEN, token_healthz=True, token_metrics=True)
    with worker_web(db_url, access=access) as client:
        for path in ("/healthz", "/metrics"):
            assert client.get(path).status == 401
            assert client.get(path, headers=bearer()).status == 200
    with worker_web(db_url, access=WebAccess(token=TOKEN, token_metrics=True)) as client:
        assert client.get("/healthz").status == 200
        assert client.get("/metrics").status == 401


def test_login_sets_a_strict_http_only_cookie_that_opens_the_page(guarded: Client) -> None:
    form = guarded.get("/login?next=/status")
    assert form.status == 200 and 'name="token"' in form.body
    assert "Content-Security-Policy" in form.headers
    reply = guarded.request(
        "/login", method="POST", body=urlencode({"token": TOKEN, "next": "/runs?limit=1"})
    )
    assert reply.status == 303 and reply.headers["Location"] == "/runs?limit=1"
    flags = [part.strip() for part in reply.headers["Set-Cookie"].split(";")]
    assert "HttpOnly" in flags and "SameSite=Strict" in flags and "Path=/" in flags
    assert f"Max-Age={SESSION_SECONDS}" in flags
    cookie = flags[0]
    assert cookie.startswith(f"{COOKIE}=") and TOKEN not in cookie  # an HMAC, not the token
    for path in ("/status", "/runs", "/status/run?id=nobody"):
        assert guarded.get(path, headers={"Cookie": cookie}).status in (200, 404), path
    tampered = cookie[:-1] + ("0" if cookie[-1] != "0" else "1")
    assert guarded.get("/runs", headers={"Cookie": tampered}).status == 401
    logout = guarded.request("/logout", method="POST", headers={"Cookie": cookie})
    assert logout.status == 303 and "Max-Age=0" in logout.headers["Set-Cookie"]


def test_a_wrong_token_on_the_form_is_refused(guarded: Client) -> None:
    reply = guarded.request("/login", method="POST", body=urlencode({"token": "guess"}))
    assert reply.status == 401 and "wrong token" in reply.body
    assert "Set-Cookie" not in reply.headers


# Each leads off-site once a browser's WHATWG parser strips tabs and newlines and reads "\\"
# as "/" (issue 40, item 8: ``next=/%09/evil.example`` answered ``Location: /\\t/evil.example``).
OFF_SITE = [
    "//evil.example/x",
    "https://evil.example",
    "/\\evil",
    "",
    "/\t/evil.example",
    "/\n/evil.example",
    "/\r\n/evil.example",
    "\t//evil.example",
    " //evil.example",
    "/\\/evil.example",
    "\\\\evil.example",
    "/\t\\evil.example",
    "javascript:alert(1)",
]


@pytest.mark.parametrize("target", OFF_SITE)
def test_login_only_returns_to_this_server(guarded: Client, target: str) -> None:
    form = urlencode({"token": TOKEN, "next": target})
    reply = guarded.request("/login", method="POST", body=form)
    assert reply.status == 303 and reply.headers["Location"] == "/status"


def test_the_form_carries_only_a_path_of_this_server(guarded: Client) -> None:
    """``/login?next=/%09/evil.example``: the form's hidden ``next`` is the home page."""
    form = guarded.get("/login?next=/%09/evil.example")
    assert form.status == 200 and 'name="next" value="/status"' in form.body


@pytest.mark.parametrize("target", ["/%09/evil.example", "/%5Cevil.example", "//evil.example"])
def test_without_a_token_login_never_leads_off_site(open_web: Client, target: str) -> None:
    """With no token configured ``GET /login`` redirects at once: to this server only."""
    reply = open_web.get(f"/login?next={target}")
    assert reply.status == 303 and reply.headers["Location"] == "/status"
    kept = open_web.get("/login?next=/runs%3Flimit%3D1")
    assert kept.status == 303 and kept.headers["Location"] == "/runs?limit=1"


def test_a_session_expires_and_dies_with_a_new_token() -> None:
    access = WebAccess(token=TOKEN)
    now = time.time()
    cookie = access.new_session(now)
    assert access.session_valid(cookie, now)
    assert not access.session_valid(cookie, now + SESSION_SECONDS + 1)
    assert not WebAccess(token="rotated").session_valid(cookie, now)
    assert not access.session_valid(session_value(TOKEN, int(now) - 1), now)
    assert not access.session_valid("99999999999999999999.x", now)


# ------------------------------------------------------------------ secrets in URLs


def test_no_secret_of_the_database_url_shows(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}?password=qs-secret&sslkey=key-secret"
    with worker_web(url) as client:
        health = client.get("/healthz")
        page = client.get("/status")
    body = json.loads(health.body)
    assert "db_url" not in body and "a.db" not in health.body  # no URL at all (issue 40)
    for text in (health.body, page.body):
        assert "qs-secret" not in text and "key-secret" not in text
    assert "password=***" in page.body


def test_a_password_sqlalchemy_accepts_unencoded_never_shows() -> None:
    """``/``, ``?`` and ``#`` in the password, credentials in ``options`` and ``dsn``
    (issue 40, item 9): the status page shows the URL redacted, /healthz no URL at all."""
    url = (
        "postgresql+psycopg://lg:pw/se?cr#et@127.0.0.1:1/audit"
        "?options=-c%20password%3Dopt-secret&dsn=password%3Ddsn-secret&connect_timeout=1"
    )
    with worker_web(url) as client:
        health = client.get("/healthz")
        page = client.get("/status")
    assert "db_url" not in json.loads(health.body) and "127.0.0.1:1" not in health.body
    assert "lg:***@127.0.0.1:1/audit?options=***&amp;dsn=***" in page.body
    for secret in ("pw/se", "cr#et", "opt-secret", "dsn-secret"):
        assert secret not in health.body and secret not in page.body
