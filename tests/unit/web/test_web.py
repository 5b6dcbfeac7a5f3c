"""The worker's HTTP views served by a real aiohttp server (the Faust app's web driver, no
broker), on SQLite and PostgreSQL: /healthz and its health provider, /metrics, the status
page's filters, chart and health cards, the run timeline, static assets, and escaping of
every value that comes from the audit trail."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode

import faust
import pytest
from db_fixtures import record_progress
from web_client import served

from streams.audit.store import AuditStore
from streams.core.events import Action, Decision
from streams.observability.metrics import WorkerMetrics
from streams.web import CSP, register_views

HOSTILE = "<script>alert('x')</script>\"&'"
NOW = int(time.time() * 1000)
MIN = 60_000


def decision(run_id: str, seq: int, action: Action, **over: Any) -> Decision:
    values: dict[str, Any] = {
        "run_id": run_id,
        "agent_id": "coder",
        "gateway_id": "gw-1",
        "seq": seq,
        "event_time": NOW - 10 * MIN + seq * 1000,
        "action": action,
        "detector": "generic_repeat",
        "severity": "warning" if action == Action.WARN else "critical",
        "count": 5 + seq,
        "tool_name": "exec",
        "reason": f"exec repeated {5 + seq} times",
    }
    values.update(over)
    return Decision(**values)


def fleet() -> list[Decision]:
    """Four runs: a ping-pong that got aborted, a warned one, an old one, a hostile one."""
    return [
        decision("run-a", 3, Action.WARN, detector="ping_pong", tool_name="read_file"),
        decision("run-a", 5, Action.BLOCK, detector="ping_pong", tool_name="read_file"),
        decision("run-a", 7, Action.ABORT, detector="ping_pong", tool_name="read_file"),
        decision("run-a", 4, Action.WARN, detector="generic_repeat"),
        decision("run-b", 2, Action.WARN, agent_id="support", tool_name="search"),
        decision("run-old", 9, Action.BLOCK, agent_id="support", event_time=NOW - 3 * 86_400_000),
        decision(
            HOSTILE,
            1,
            Action.BLOCK,
            event_time=NOW - MIN,
            agent_id=HOSTILE,
            gateway_id=HOSTILE,
            detector=HOSTILE,
            tool_name=HOSTILE,
            reason=HOSTILE,
            paired_tool_name=HOSTILE,
            error_code=HOSTILE,
            config_version=HOSTILE,
            extra={HOSTILE: HOSTILE},
        ),
    ]


class Tags(HTMLParser):
    """Every start tag with its attributes, and the page's text."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]

    def by_id(self, ident: str) -> dict[str, str | None]:
        return next(attrs for _, attrs in self.tags if attrs.get("id") == ident)


def assert_no_injection(page: str) -> Tags:
    """The page's markup is only ours: one script (same origin), no tag from the trail."""
    assert "<script>alert" not in page
    parsed = Tags(page)
    scripts = parsed.named("script")
    assert scripts == [{"src": "/static/loopguard/status.js", "defer": None}]
    for _, attrs in parsed.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (name, value)
            if name in ("href", "src"):
                assert value is not None and value.startswith("/"), value
    assert all(" style=" not in tag for tag in re.findall(r"<[^>]+>", page)), "CSP forbids"
    return parsed


class Server:
    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, path: str) -> tuple[int, dict[str, str], str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=20) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read().decode()


@contextmanager
def serve(db_url: str, **options: Any) -> Iterator[Server]:
    """register_views on a fresh Faust app; its aiohttp app served on a free port."""
    app = faust.App(f"web-{uuid.uuid4().hex[:8]}", broker="kafka://127.0.0.1:1", web_enabled=True)
    register_views(app, db_url, **options)
    with served(app) as port:
        yield Server(f"http://127.0.0.1:{port}")


@pytest.fixture
def trail(audit_store: AuditStore) -> AuditStore:
    audit_store.record_decisions(fleet())
    record_progress(audit_store, "run-a", "coder", 12, NOW - 9 * MIN, "aborted", events=12)
    audit_store.record_dead_letter("t", 0, 1, "bad", b"x")
    return audit_store


@pytest.fixture
def server(trail: AuditStore) -> Iterator[Server]:
    metrics = WorkerMetrics()
    metrics.set_lag(2, 17)
    metrics.set_runs(3)
    metrics.observe_event("tool_call")
    url = trail.url.render_as_string(hide_password=False)
    with serve(url, metrics=metrics, clock_ms=lambda: NOW) as running:
        yield running


def run_rows(page: str) -> list[str]:
    return [attrs["data-run"] for attrs in Tags(page).named("tr") if "data-run" in attrs]


# ------------------------------------------------------------------ /healthz and /metrics


def test_healthz_default_is_the_previous_answer(server: Server) -> None:
    status, headers, body = server.get("/healthz")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    health = json.loads(body)
    assert set(health) == {"status", "app_id", "db", "uptime_seconds"}  # no URL (issue 40)
    assert health["status"] == "ok" and health["db"] == "ok"


@pytest.mark.parametrize(
    ("provider", "code", "fields"),
    [
        (lambda: {"lag": 12, "last_event_age_seconds": 1.5}, 200, {"status": "ok", "lag": 12}),
        (lambda: {"status": "degraded", "lag": 10_000}, 200, {"status": "degraded"}),
        (lambda: {"status": "failing", "db": "x"}, 503, {"status": "failing", "db": "x"}),
        (lambda: 1 / 0, 503, {"status": "error"}),
    ],
)
def test_healthz_health_provider(tmp_path, provider, code, fields) -> None:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    AuditStore(url).migrate()
    with serve(url, health=provider) as running:
        status, _, body = running.get("/healthz")
    health = json.loads(body)
    assert status == code, health
    assert fields.items() <= health.items()
    if fields["status"] == "error":
        assert "ZeroDivisionError" in health["health_error"]


def test_healthz_async_provider_and_database_down(tmp_path) -> None:
    async def provider() -> dict[str, Any]:
        return {"partitions": [0, 1], "note": HOSTILE}

    with serve(f"sqlite:///{tmp_path}/no-schema.db", health=provider) as running:  # not migrated
        status, _, body = running.get("/healthz")
        health = json.loads(body)
        assert status == 200 and health["partitions"] == [0, 1]
        assert health["db"].startswith("audit database unavailable")
        assert health["status"] == "degraded"  # decisions flow; the audit trail waits
        status, headers, page = running.get("/status")
        assert status == 503 and headers["Content-Type"].startswith("text/html")
        assert "audit database unavailable" in page and 'id="worker-health"' in page
        assert "not reported by this worker" in page  # no WorkerMetrics handed over
        assert "<dt>partitions</dt><dd>0, 1</dd>" in page  # the provider's fields, no JSON
        parsed = assert_no_injection(page)
        assert HOSTILE in "".join(parsed.text)


def test_bad_parameters_are_400_and_a_database_down_503_in_the_views_kind(tmp_path) -> None:
    """JSON views answer ``{"error": ...}``, pages one line of text; never a traceback."""
    with serve(f"sqlite:///{tmp_path}/no-schema.db") as running:  # not migrated
        for path in ("/runs", "/runs/run-a/history"):
            status, headers, body = running.get(path)
            assert status == 503 and headers["Content-Type"].startswith("application/json")
            assert json.loads(body)["error"].startswith("audit database unavailable"), path
        status, headers, body = running.get("/status/run?id=run-a")
        assert status == 503 and headers["Content-Type"].startswith("text/plain")
        assert body.startswith("audit database unavailable") and "\n" not in body.strip()
        status, headers, body = running.get("/runs?limit=x")
        assert status == 400 and json.loads(body) == {
            "error": "limit: expected a whole number, got 'x'"
        }
        for path in ("/status?limit=0", "/status/run"):
            status, headers, body = running.get(path)
            assert status == 400 and headers["Content-Type"].startswith("text/plain"), path
            assert body.split(":")[0] in ("limit", "id"), (path, body)


def test_metrics_endpoint(server: Server) -> None:
    status, headers, body = server.get("/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert 'loopguard_consumer_lag{partition="2"} 17.0' in body
    assert "loopguard_runs_in_table 3.0" in body
    assert 'loopguard_events_total{type="tool_call"} 1.0' in body


def test_metrics_without_a_worker_metrics_object(tmp_path) -> None:
    with serve(f"sqlite:///{tmp_path / 'a.db'}") as running:
        status, _, body = running.get("/metrics")
    assert status == 200 and "# TYPE loopguard_decisions_total counter" in body


# ------------------------------------------------------------------ the status page


def test_status_page_groups_runs_and_escapes_everything(server: Server) -> None:
    status, headers, page = server.get("/status")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert headers["Content-Security-Policy"] == CSP
    assert headers["X-Content-Type-Options"] == "nosniff"
    parsed = assert_no_injection(page)
    # one line per run, most recent first; the 3-day-old run is outside the default 24 h
    assert run_rows(page) == [HOSTILE, "run-a", "run-b"]
    row_a = page[page.index('data-run="run-a"') :].split("</tr>")[0]
    assert '<span class="badge abort">abort</span>' in row_a  # worst action
    assert "ping_pong +1" in row_a and "read_file" in row_a  # its detector, tool
    assert ">12</td>" in row_a  # the headline decision's count
    assert ">4</td>" in row_a  # decisions
    assert "aborted, 12 events" in row_a  # from the run's progress record
    # every hostile value is shown, as text
    text = "".join(parsed.text)
    assert text.count(HOSTILE) >= 4  # run, agent, detector, tool, reason, top lists, ...
    # links carry it url-encoded
    assert f'href="/status/run?{urlencode({"id": HOSTILE}).replace("&", "&amp;")}"' in page
    assert f"/status/run?{urlencode({'id': 'run-a'})}" in page
    # health cards
    assert parsed.by_id("db-state") and 'id="worker-health"' in page
    assert "p2: 17" in page
    assert re.search(r"<dt>dead letters</dt><dd>1</dd>", page)
    assert re.search(r"<dt>runs in table</dt><dd>3</dd>", page)


@pytest.mark.parametrize(
    ("query", "rows"),
    [
        ({"agent": "support"}, ["run-b"]),
        ({"agent": "support", "window": "7d"}, ["run-b", "run-old"]),
        ({"window": "all"}, [HOSTILE, "run-a", "run-b", "run-old"]),
        ({"detector": "ping_pong"}, ["run-a"]),
        ({"tool": "search"}, ["run-b"]),
        ({"action": "block"}, [HOSTILE, "run-a"]),
        ({"action": "abort"}, ["run-a"]),
        ({"action": "warn", "agent": "coder"}, ["run-a"]),
        ({"agent": HOSTILE}, [HOSTILE]),
        ({"agent": "nobody"}, []),
        ({"window": "15m", "limit": "1"}, [HOSTILE]),
        (
            {"since": str(NOW - 10 * MIN + 2000), "until": str(NOW - 10 * MIN + 4500)},
            ["run-a", "run-b"],
        ),
        ({"agent": "", "detector": "", "action": "", "window": ""}, [HOSTILE, "run-a", "run-b"]),
    ],
)
def test_status_filters(server: Server, query: dict[str, str], rows: list[str]) -> None:
    status, _, page = server.get(f"/status?{urlencode(query)}")
    assert status == 200, page
    assert run_rows(page) == rows
    assert_no_injection(page)
    parsed = Tags(page)
    # the form shows the filters in force
    if query.get("agent"):
        assert parsed.by_id("f-agent")["value"] == query["agent"]
    for name in ("detector", "action"):
        if query.get(name):
            selected = [a for a in parsed.named("option") if "selected" in a]
            assert {"value": query[name], "selected": None} in selected
    if not rows:
        assert "no loop decisions match" in page


def test_status_row_limit_says_how_many_more(server: Server) -> None:
    page = server.get("/status?limit=1")[2]
    assert run_rows(page) == [HOSTILE]
    assert re.search(r'id="runs-count">1 of 3\s+runs', page)
    assert "limit=5" in page  # "show more"


def test_status_chart(server: Server) -> None:
    page = server.get("/status?window=1h")[2]
    parsed = Tags(page)
    svg = parsed.by_id("decisions-chart")
    assert svg["viewbox"] == "0 0 960 220"
    bars = [a for a in parsed.named("rect") if "bar" in (a.get("class") or "")]
    counts: dict[str, int] = {}
    for bar in bars:
        action = bar["class"].split()[1]
        counts[action] = counts.get(action, 0) + int(bar["data-count"])
        assert float(bar["height"]) > 0
    assert counts == {"warn": 3, "block": 2, "abort": 1}  # the last hour's decisions
    assert "6 decisions" in page
    # each bar links to its own time range, keeping the other filters
    links = [a["href"] for a in parsed.named("a") if "since=" in (a.get("href") or "")]
    assert links and all("until=" in link for link in links)
    page = server.get("/status?agent=support&window=1h")[2]
    bars = [a for a in Tags(page).named("rect") if "bar" in (a.get("class") or "")]
    assert [int(b["data-count"]) for b in bars] == [1]
    assert all("agent=support" in a["href"] for a in Tags(page).named("a") if "since=" in a["href"])


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("action=bogus", "action: expected one of warn, block, abort"),
        ("window=2h", "window: expected one of"),
        ("limit=0", "limit: must be between 1 and 1000"),
        ("since=yesterday", "since: expected a whole number"),
        ("since=10&until=5", "until: must be after since"),
        ("refresh=-1", "refresh: must be between 0"),
        ("agnet=coder", "unknown query parameter 'agnet'"),
    ],
)
def test_status_bad_parameters(server: Server, query: str, why: str) -> None:
    status, _, body = server.get(f"/status?{query}")
    assert status == 400 and why in body


def test_status_refresh(server: Server) -> None:
    assert Tags(server.get("/status")[2]).named("body") == [{"data-refresh": "30"}]
    assert Tags(server.get("/status?refresh=0")[2]).named("body") == [{}]


# ------------------------------------------------------------------ the run page


def test_run_timeline(server: Server) -> None:
    status, headers, page = server.get("/status/run?id=run-a")
    assert status == 200 and headers["Content-Security-Policy"] == CSP
    assert_no_injection(page)
    parsed = Tags(page)
    rows = [a["class"] for a in parsed.named("tr") if (a.get("class") or "").startswith("decision")]
    assert rows == ["decision warn", "decision warn", "decision block", "decision abort"]
    seqs = re.findall(r'<tr class="decision \w+"><td class="num">(\d+)</td>', page)
    assert seqs == ["3", "4", "5", "7"]  # in the order the run produced them
    assert parsed.by_id("trail-note")
    assert "not written to the database" in page
    assert re.search(r"<dt>events processed</dt><dd>12</dd>", page)
    assert re.search(r"<dt>last seq</dt><dd>12</dd>", page)
    assert re.search(r"<dt>status</dt><dd>aborted</dd>", page)
    marks = [a for a in parsed.named("circle") if "mark" in (a.get("class") or "")]
    assert len(marks) == 4
    assert "/runs/run-a/history" in page


def test_run_timeline_escapes_everything(server: Server) -> None:
    status, _, page = server.get(f"/status/run?{urlencode({'id': HOSTILE})}")
    assert status == 200
    parsed = assert_no_injection(page)
    text = "".join(parsed.text)
    assert text.count(HOSTILE) >= 6  # id, agent, gateway, detector, tool, reason, extras
    assert "paired with " + HOSTILE in text and "error " + HOSTILE in text


def test_run_unknown_and_missing_id(server: Server) -> None:
    status, _, page = server.get("/status/run?id=no-such-run")
    assert status == 404 and "no decisions recorded for this run" in page
    assert server.get("/status/run")[0] == 400


# ------------------------------------------------------------------ static assets


@pytest.mark.parametrize(
    ("name", "ctype"),
    [("status.css", "text/css"), ("status.js", "text/javascript"), ("favicon.svg", "image/svg")],
)
def test_static_assets(server: Server, name: str, ctype: str) -> None:
    status, headers, body = server.get(f"/static/loopguard/{name}")
    assert status == 200 and headers["Content-Type"].startswith(ctype) and body


@pytest.mark.parametrize(
    "name", ["nope.css", "..%2Fweb.py", "web.py", ".hidden.css", "..%2F..%2Fsettings.py"]
)
def test_static_assets_refuse_anything_else(server: Server, name: str) -> None:
    assert server.get(f"/static/loopguard/{name}")[0] == 404


# ------------------------------------------------------------------ JSON endpoints still answer


def test_runs_and_history_json(server: Server, trail: AuditStore) -> None:
    status, _, body = server.get("/runs?agent=support")
    assert status == 200
    assert [r["run_id"] for r in json.loads(body)] == ["run-b", "run-old"]
    status, _, body = server.get("/runs/run-a/history")
    assert [d["seq"] for d in json.loads(body)] == [3, 4, 5, 7]
    assert server.get("/runs?limit=x")[0] == 400
