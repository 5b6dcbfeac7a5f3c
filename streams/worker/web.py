"""HTTP views on the worker's Faust web server (``loopguard worker --web-port PORT``).

* ``GET /healthz`` – liveness, whether the audit database answers, plus whatever the
  worker's health provider adds (lag, last event, ...); 503 when it reports a failure;
* ``GET /metrics`` – Prometheus metrics (:mod:`streams.worker.metrics`), text format 0.0.4;
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
"""

from __future__ import annotations

import asyncio
import html
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from faust import web

from streams.audit import queries
from streams.audit.queries import ACTION_ORDER, Chart, Filters, Overview, RunLine, Timeline
from streams.worker.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from streams.worker.metrics import WorkerMetrics

T = TypeVar("T")
HealthProvider = Callable[[], Mapping[str, Any]]

RUNS_PARAMS = ("agent", "gateway", "detector", "severity", "since", "until", "limit")
STATUS_PARAMS = (
    "agent",
    "detector",
    "tool",
    "action",
    "window",
    "since",
    "until",
    "limit",
    "refresh",
)
SEVERITIES = ("warning", "critical")
DEFAULT_LIMIT = 50  # as `loopguard runs`
MAX_LIMIT = 10_000
STATUS_LIMIT = 100
DEFAULT_REFRESH = 30
#: The status page's time filter: label, span in ms (None: everything in the trail).
WINDOWS: dict[str, int | None] = {
    "15m": 15 * 60_000,
    "1h": 3_600_000,
    "6h": 6 * 3_600_000,
    "24h": 24 * 3_600_000,
    "7d": 7 * 86_400_000,
    "30d": 30 * 86_400_000,
    "all": None,
}
DEFAULT_WINDOW = "24h"
HEALTHY = ("ok", "degraded")  # /healthz answers 200 for these, 503 for anything else
STATIC_PREFIX = "/static/loopguard/"
STATIC_TYPES = {
    ".css": "text/css",
    ".js": "text/javascript",
    ".svg": "image/svg+xml",
}
CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HTML_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
TRAIL_NOTE = (
    "The audit trail stores each run's decisions and its progress (events processed, last "
    "sequence number, status). Tool calls, results and compactions are not written to the "
    "database, so they are not listed here; a decision's seq places it among the run's events."
)

esc = html.escape


class BadRequest(ValueError):
    pass


# --------------------------------------------------------------------------- query strings


def summary_dict(summary: Any) -> dict[str, Any]:
    """One ``RunSummary`` exactly as ``loopguard runs --json`` prints it."""
    return summary.to_dict()


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


def _check_known(query: Any, known: tuple[str, ...]) -> None:
    unknown = sorted(set(query) - set(known))
    if unknown:
        raise BadRequest(f"unknown query parameter {unknown[0]!r} (known: {', '.join(known)})")


def runs_filters(query: Any) -> dict[str, Any]:
    """``/runs`` query string → ``AuditStore.runs`` keyword arguments (400 on bad input)."""
    _check_known(query, RUNS_PARAMS)
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


@dataclass(frozen=True)
class StatusQuery:
    """The status page's parameters, validated; ``params()`` rebuilds its query string."""

    agent: str | None = None
    detector: str | None = None
    tool: str | None = None
    action: str | None = None
    window: str = DEFAULT_WINDOW
    since: int | None = None  # epoch ms; with ``until``, overrides ``window``
    until: int | None = None
    limit: int = STATUS_LIMIT
    refresh: int = DEFAULT_REFRESH

    @property
    def custom_range(self) -> bool:
        return self.since is not None or self.until is not None

    def filters(self, now_ms: int) -> Filters:
        since, until = self.since, self.until
        if not self.custom_range:
            span = WINDOWS[self.window]
            since = None if span is None else now_ms - span
        return Filters(
            agent=self.agent,
            detector=self.detector,
            tool=self.tool,
            min_action=self.action,
            since_ms=since,
            until_ms=until,
        )

    def params(self, **changes: Any) -> dict[str, str]:
        """Non-default parameters (after ``changes``), for links that keep the other filters."""
        values = {**asdict(self), **changes}
        if values["since"] is not None or values["until"] is not None:
            values["window"] = DEFAULT_WINDOW
        defaults = asdict(StatusQuery())
        return {
            name: str(value)
            for name, value in values.items()
            if value is not None and value != defaults[name]
        }

    def href(self, path: str = "/status", **changes: Any) -> str:
        query = urlencode(self.params(**changes))
        return f"{path}?{query}" if query else path


def status_query(query: Any) -> StatusQuery:
    """``/status`` query string → :class:`StatusQuery` (400 on bad input; "" means any)."""
    _check_known(query, STATUS_PARAMS)
    action = query.get("action") or None
    if action is not None and action not in ACTION_ORDER:
        raise BadRequest(f"action: expected one of {', '.join(ACTION_ORDER)}, got {action!r}")
    window = query.get("window") or DEFAULT_WINDOW
    if window not in WINDOWS:
        raise BadRequest(f"window: expected one of {', '.join(WINDOWS)}, got {window!r}")
    since = _int_param(query, "since", None, 0, None)
    until = _int_param(query, "until", None, 0, None)
    if since is not None and until is not None and until <= since:
        raise BadRequest("until: must be after since")
    return StatusQuery(
        agent=query.get("agent") or None,
        detector=query.get("detector") or None,
        tool=query.get("tool") or None,
        action=action,
        window=window,
        since=since,
        until=until,
        limit=_int_param(query, "limit", STATUS_LIMIT, 1, 1000),
        refresh=_int_param(query, "refresh", DEFAULT_REFRESH, 0, 3600),
    )


# --------------------------------------------------------------------------- formatting


def _when(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "–"
    try:
        return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(epoch_ms)


def _ago(epoch_ms: int | None, now_ms: int) -> str:
    if epoch_ms is None:
        return "never"
    seconds = (now_ms - epoch_ms) / 1000
    if seconds < 0:
        return "in the future (gateway clock ahead)" if seconds < -60 else "just now"
    return f"{_duration(seconds)} ago" if seconds >= 1 else "just now"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"


def _badge(action: str) -> str:
    known = action if action in ACTION_ORDER else "unknown"
    return f'<span class="badge {known}">{esc(action)}</span>'


def _page(title: str, body: str, refresh: int = 0) -> str:
    refresh_attr = f' data-refresh="{refresh}"' if refresh else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<link rel="icon" href="{STATIC_PREFIX}favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="{STATIC_PREFIX}status.css">
<script src="{STATIC_PREFIX}status.js" defer></script>
</head>
<body{refresh_attr}>
{body}
</body></html>
"""


def _header(app_id: str, now_ms: int, subtitle: str) -> str:
    return f"""<header>
<h1>loopguard <span class="muted">&middot; {esc(subtitle)}</span></h1>
<nav><a href="/status">status</a><a href="/metrics">metrics</a><a href="/healthz">healthz</a>
<a href="/runs">runs JSON</a></nav>
<span class="muted small">worker {esc(app_id)} &middot; {esc(_when(now_ms))} UTC</span>
</header>"""


def _dl(items: list[tuple[str, str]]) -> str:
    """A definition list; values are already-escaped HTML."""
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f"<dl>{rows}</dl>"


def _plain(value: Any) -> str:
    if isinstance(value, dict | list | tuple):
        return esc(json.dumps(value, default=str, ensure_ascii=False))
    return esc("–" if value is None else str(value))


def render_worker_card(
    snapshot: Mapping[str, Any] | None, health: Mapping[str, Any], now_ms: int
) -> str:
    """This worker: from its metrics, then any fields the health provider adds."""
    items: list[tuple[str, str]] = []
    state = str(health.get("status", "ok"))
    css = "state-ok" if state in HEALTHY else "state-bad"
    items.append(("state", f'<span class="{css}" id="worker-state">{esc(state)}</span>'))
    shown = {"status", "app_id"}
    if snapshot:
        lag = snapshot.get("lag") or {}
        lag_text = (
            ", ".join(f"p{p}: {n}" for p, n in sorted(lag.items())) if lag else "not reported"
        )
        age = snapshot.get("last_event_age_seconds")
        mean = snapshot.get("mean_processing_ms")
        items += [
            ("uptime", esc(_duration(float(snapshot.get("uptime_seconds") or 0)))),
            ("events consumed", esc(str(snapshot.get("events", 0)))),
            ("last event", esc("none yet" if age is None else f"{_duration(age)} ago")),
            ("decisions sent", esc(str(snapshot.get("decisions", 0)))),
            ("dead letters", esc(str(snapshot.get("dead_letters", 0)))),
            ("consumer lag", f"{esc(str(snapshot.get('lag_total', 0)))} ({esc(lag_text)})"),
            ("runs in table", esc(str(snapshot.get("runs_in_table", 0)))),
            (
                "audit backlog / errors",
                esc(
                    f"{snapshot.get('audit_backlog', 0)} / {snapshot.get('audit_write_errors', 0)}"
                ),
            ),
            ("mean processing", esc("–" if mean is None else f"{mean} ms")),
        ]
        shown |= {"uptime_seconds", "lag", "lag_total", "last_event_age_seconds"}
    else:
        items.append(("metrics", "not reported by this worker"))
    for key, value in health.items():
        if key not in shown and key not in ("db", "db_url"):
            items.append((str(key), _plain(value)))
    return f'<div class="card" id="worker-health"><h2>This worker</h2>{_dl(items)}</div>'


def render_db_card(db_url: str, overview: Overview | None, error: str | None, now_ms: int) -> str:
    if error is not None or overview is None:
        items = [
            ("state", f'<span class="state-bad" id="db-state">{esc(error or "unknown")}</span>'),
            ("database", esc(db_url)),
        ]
    else:
        items = [
            ("state", '<span class="state-ok" id="db-state">ok</span>'),
            ("database", esc(db_url)),
            ("decisions", esc(str(overview.decisions))),
            ("dead letters", esc(str(overview.dead_letters))),
            ("runs tracked", esc(str(overview.runs_tracked))),
            (
                "last decision",
                esc(
                    f"{_when(overview.last_decision_time)} "
                    f"({_ago(overview.last_decision_time, now_ms)})"
                    if overview.last_decision_time is not None
                    else "none yet"
                ),
            ),
        ]
    return f'<div class="card" id="db-health"><h2>Audit database</h2>{_dl(items)}</div>'


def render_filters(q: StatusQuery, facets: Mapping[str, list[str]]) -> str:
    agents = "".join(f'<option value="{esc(a)}"></option>' for a in facets.get("agents", []))
    detectors = list(facets.get("detectors", []))
    if q.detector and q.detector not in detectors:
        detectors.append(q.detector)

    def options(values: list[tuple[str, str]], selected: str | None) -> str:
        return "".join(
            f'<option value="{esc(v)}"{" selected" if v == (selected or "") else ""}>'
            f"{esc(label)}</option>"
            for v, label in values
        )

    detector_opts = options([("", "any")] + [(d, d) for d in detectors], q.detector)
    action_opts = options(
        [("", "any"), ("warn", "warn or worse"), ("block", "block or worse"), ("abort", "abort")],
        q.action,
    )
    window_values = [(w, "all time" if w == "all" else f"last {w}") for w in WINDOWS]
    if q.custom_range:
        window_values.insert(0, ("", f"{_when(q.since)} – {_when(q.until)}"))
    window_opts = options(window_values, "" if q.custom_range else q.window)
    refresh_opts = options(
        [("0", "off"), ("10", "10 s"), ("30", "30 s"), ("60", "60 s")], str(q.refresh)
    )
    hidden = (
        f'<input type="hidden" name="limit" value="{q.limit}">' if q.limit != STATUS_LIMIT else ""
    )
    return f"""<form class="filters" id="filters" method="get" action="/status">
<label>agent<input name="agent" id="f-agent" list="agents" value="{esc(q.agent or "")}"
 placeholder="any" autocomplete="off"><datalist id="agents">{agents}</datalist></label>
<label>detector<select name="detector" id="f-detector">{detector_opts}</select></label>
<label>tool<input name="tool" id="f-tool" value="{esc(q.tool or "")}" placeholder="any"
 autocomplete="off"></label>
<label>action<select name="action" id="f-action">{action_opts}</select></label>
<label>time<select name="window" id="f-window">{window_opts}</select></label>
<label>auto-refresh<select name="refresh" id="f-refresh">{refresh_opts}</select></label>
{hidden}<button type="submit">Apply</button> <a href="/status">reset</a>
</form>"""


def _nice_ceiling(value: int) -> int:
    """1, 2, 5, 10, 20, 50, ... at or above ``value``."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m >= value:
                return step * m
        step *= 10


def _tick_label(epoch_ms: int, span_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    if span_ms <= 2 * 86_400_000:
        return moment.strftime("%H:%M:%S" if span_ms <= 600_000 else "%H:%M")
    return moment.strftime("%m-%d")


def render_chart(chart: Chart, q: StatusQuery) -> str:
    """Stacked bars of decisions per bucket by action, as inline SVG (no script needed).

    Each bar links to the same filters narrowed to its time bucket.
    """
    width, height = 960, 220
    left, right, top, bottom = 44, 10, 12, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(1, len(chart.buckets))
    peak = max((sum(b.values()) for b in chart.buckets), default=0)
    y_max = _nice_ceiling(max(peak, 1))
    slot = plot_w / n
    bar_w = max(1.0, slot * 0.8)
    parts = [
        f'<svg class="chart" id="decisions-chart" viewBox="0 0 {width} {height}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="decisions over time by action: {chart.total} in range">'
    ]
    for i in range(3):
        value = y_max * i // 2
        y = top + plot_h - plot_h * value / y_max
        parts.append(
            f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{value}</text>'
        )
    colors = {"warn": "#c98a00", "block": "#e8590c", "abort": "#c92a2a"}
    span = chart.width_ms * n
    for index, bucket in enumerate(chart.buckets):
        total = sum(bucket.values())
        if not total:
            continue
        start = chart.start_ms + index * chart.width_ms
        x = left + index * slot + (slot - bar_w) / 2
        y = top + plot_h
        tip = f"{_when(start)} – {_when(start + chart.width_ms)} UTC: " + ", ".join(
            f"{bucket[a]} {a}" for a in ACTION_ORDER if bucket[a]
        )
        link = q.href(since=start, until=start + chart.width_ms)
        parts.append(f'<a href="{esc(link)}"><title>{esc(tip)}</title>')
        for action in ACTION_ORDER:
            count = bucket.get(action, 0)
            if not count:
                continue
            h = plot_h * count / y_max
            y -= h
            parts.append(
                f'<rect class="bar {action}" data-count="{count}" x="{x:.1f}" y="{y:.1f}" '
                f'width="{bar_w:.1f}" height="{h:.1f}" fill="{colors[action]}"/>'
            )
        parts.append("</a>")
    parts.append(
        f'<line class="axis" x1="{left}" x2="{width - right}" y1="{top + plot_h}" '
        f'y2="{top + plot_h}"/>'
    )
    tick = queries.bucket_width(span, target=6)  # a round interval, at most 6 labels
    first_tick = -(-chart.start_ms // tick) * tick
    for moment in range(first_tick, chart.start_ms + span + 1, tick):
        x = left + plot_w * (moment - chart.start_ms) / span
        if x > width - right - 20:
            continue  # its label would be cut off
        parts.append(
            f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{top + plot_h}" '
            f'y2="{top + plot_h + 4}"/>'
            f'<text x="{x:.1f}" y="{height - 8}" text-anchor="middle">'
            f"{esc(_tick_label(moment, span))}</text>"
        )
    parts.append("</svg>")
    legend = "".join(f'<span class="{a}">{a}</span>' for a in ACTION_ORDER)
    per = _duration(chart.width_ms / 1000)
    return (
        '<div class="chart-wrap">' + "".join(parts) + f'<div class="legend">{legend}'
        f'<span class="muted">{chart.total} decisions &middot; one bar per {esc(per)} '
        "&middot; UTC &middot; click a bar to zoom in</span></div></div>"
    )


def render_tops(title: str, css_id: str, values: list[tuple[str, int]], link: Callable) -> str:
    if not values:
        items = '<li class="muted">none</li>'
    else:
        items = "".join(
            f'<li><a href="{esc(link(v))}">{esc(v or "(none)")}</a> '
            f'<span class="muted">{n}</span></li>'
            for v, n in values
        )
    return f'<div class="card" id="{css_id}"><h2>{esc(title)}</h2><ol>{items}</ol></div>'


def render_runs_table(lines: list[RunLine], total: int, q: StatusQuery, now_ms: int) -> str:
    rows = []
    for line in lines:
        run_link = f"/status/run?{urlencode({'id': line.run_id})}"
        agent_link = q.href(agent=line.agent_id)
        split = "/".join(str(n) for n in (line.warn, line.block, line.abort))
        more = f" +{line.detectors - 1}" if line.detectors > 1 else ""
        status = line.status or "–"
        if line.events is not None:
            status = f"{status}, {line.events} event{'' if line.events == 1 else 's'}"
        rows.append(
            f'<tr class="run" data-run="{esc(line.run_id)}">'
            f'<td class="when" title="{esc(_when(line.last_seen))} UTC">'
            f"{esc(_ago(line.last_seen, now_ms))}</td>"
            f'<td class="id"><a href="{esc(run_link)}">{esc(line.run_id)}</a></td>'
            f'<td class="id"><a href="{esc(agent_link)}">{esc(line.agent_id)}</a></td>'
            f"<td>{_badge(line.worst_action)}</td>"
            f"<td>{esc(line.detector)}{esc(more)}</td>"
            f"<td>{esc(line.tool_name)}</td>"
            f'<td class="num">{line.count}</td>'
            f'<td class="num" title="warn/block/abort: {esc(split)}">{line.decisions}</td>'
            f"<td>{esc(status)}</td>"
            f'<td class="reason">{esc(line.reason)}</td>'
            "</tr>"
        )
    if not rows:
        rows.append('<tr class="empty"><td colspan="10">no loop decisions match</td></tr>')
    shown = f"{len(lines)} of {total}" if total > len(lines) else str(total)
    more = ""
    if total > len(lines):
        more = f' &middot; <a href="{esc(q.href(limit=min(1000, q.limit * 5)))}">show more</a>'
    return f"""<h2>Runs with loop decisions <span class="muted small" id="runs-count">{shown}
runs{more}</span></h2>
<table id="runs">
<thead><tr><th>last seen</th><th>run</th><th>agent</th><th>worst action</th><th>detector</th>
<th>tool</th><th class="num">count</th><th class="num">decisions</th><th>run status</th>
<th>reason</th></tr></thead>
<tbody>
{"".join(rows)}
</tbody></table>"""


@dataclass
class StatusData:
    overview: Overview
    facets: dict[str, list[str]]
    lines: list[RunLine]
    total_runs: int
    chart: Chart
    top_agents: list[tuple[str, int]]
    top_tools: list[tuple[str, int]]


def load_status(store: Any, q: StatusQuery, now_ms: int) -> StatusData:
    """Everything the status page reads from the audit trail (one thread, several queries)."""
    filters = q.filters(now_ms)
    return StatusData(
        overview=queries.trail_overview(store),
        facets=queries.facets(store),
        lines=queries.grouped_runs(store, filters, limit=q.limit),
        total_runs=queries.count_runs(store, filters),
        chart=queries.decision_buckets(store, filters, now_ms),
        top_agents=queries.top_values(store, filters, "agent_id"),
        top_tools=queries.top_values(store, filters, "tool_name"),
    )


def render_status(
    data: StatusData | None,
    q: StatusQuery,
    *,
    app_id: str,
    db_url: str,
    db_error: str | None,
    snapshot: Mapping[str, Any] | None,
    health: Mapping[str, Any],
    now_ms: int,
) -> str:
    """The ``/status`` page; every value from the audit trail is HTML-escaped."""
    cards = (
        '<section class="cards">'
        + render_worker_card(snapshot, health, now_ms)
        + render_db_card(db_url, data.overview if data else None, db_error, now_ms)
        + "</section>"
    )
    if data is None:
        body = (
            f'<div class="error">The audit database does not answer, so there are no runs to '
            f"show: {esc(db_error or '')}</div>"
        )
    else:
        tops = (
            '<section class="tops">'
            + render_tops("Top agents", "top-agents", data.top_agents, lambda v: q.href(agent=v))
            + render_tops("Top tools", "top-tools", data.top_tools, lambda v: q.href(tool=v))
            + "</section>"
        )
        body = (
            render_filters(q, data.facets)
            + "<h2>Decisions over time by action</h2>"
            + render_chart(data.chart, q)
            + tops
            + render_runs_table(data.lines, data.total_runs, q, now_ms)
        )
    footer = (
        '<footer class="muted small">Runs, chart and counts come from the shared audit trail '
        "(the whole fleet); &ldquo;This worker&rdquo; is the worker serving this page. "
        "Times are the gateways&rsquo; event times, in UTC.</footer>"
    )
    return _page(
        "loopguard status",
        _header(app_id, now_ms, "status") + cards + body + footer,
        refresh=q.refresh,
    )


def render_seq_strip(timeline: Timeline) -> str:
    """The run's events as a line from seq 1 to its last seq, with a mark per decision."""
    decisions = timeline.decisions
    last = max(
        [d.seq for d in decisions] + ([timeline.progress.last_seq] if timeline.progress else [1])
    )
    last = max(last, 1)
    width, height, left, right = 960, 54, 20, 20
    plot = width - left - right

    def x(seq: int) -> float:
        return left + plot * (seq - 1) / max(1, last - 1) if last > 1 else left + plot / 2

    colors = {"warn": "#c98a00", "block": "#e8590c", "abort": "#c92a2a"}
    parts = [
        f'<svg class="chart" id="seq-strip" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="the run\'s events from seq 1 to {last} with its decisions">',
        f'<line class="axis" x1="{left}" x2="{width - right}" y1="22" y2="22"/>',
        f'<text x="{left}" y="48">seq 1</text>',
        f'<text x="{width - right}" y="48" text-anchor="end">seq {last}</text>',
    ]
    for d in decisions:
        action = d.action.value
        tip = f"seq {d.seq}: {action} {d.detector} on {d.tool_name} (count {d.count})"
        parts.append(
            f'<circle class="mark {esc(action)}" cx="{x(d.seq):.1f}" cy="22" r="6" '
            f'fill="{colors.get(action, "#888")}"><title>{esc(tip)}</title></circle>'
        )
    parts.append("</svg>")
    return "".join(parts)


def render_run(timeline: Timeline, *, app_id: str, now_ms: int) -> str:
    """One run's page: its progress and its decisions in order; every value escaped."""
    progress = timeline.progress
    decisions = timeline.decisions
    first = decisions[0] if decisions else None
    agent = progress.agent_id if progress else first.agent_id if first else ""
    gateway = progress.gateway_id if progress else first.gateway_id if first else ""
    worst = max((d.action.value for d in decisions), key=queries.severity, default=None)
    items = [
        ("agent", f'<a href="{esc("/status?" + urlencode({"agent": agent}))}">{esc(agent)}</a>'),
        ("gateway", esc(gateway)),
        ("worst action", _badge(worst) if worst else "none"),
        ("decisions", esc(str(len(decisions)))),
    ]
    if progress is not None:
        items += [
            ("status", esc(progress.status)),
            ("events processed", esc(str(progress.events))),
            ("last seq", esc(str(progress.last_seq))),
            ("first event", esc(f"{_when(progress.first_event_time)} UTC")),
            (
                "last event",
                esc(
                    f"{_when(progress.last_event_time)} UTC "
                    f"({_ago(progress.last_event_time, now_ms)})"
                ),
            ),
        ]
    else:
        items.append(("progress", "no progress record for this run"))
    start = progress.first_event_time if progress else decisions[0].event_time if decisions else 0
    rows = []
    for d in decisions:
        extra = ""
        if d.extra:
            extra = (
                "<details><summary>extra</summary><pre>"
                + esc(json.dumps(d.extra, indent=1, ensure_ascii=False, default=str))
                + "</pre></details>"
            )
        detail = [
            f"paired with {d.paired_tool_name}" if d.paired_tool_name else "",
            f"error {d.error_code}" if d.error_code else "",
            f"config {d.config_version}" if d.config_version else "",
        ]
        rows.append(
            f'<tr class="decision {esc(d.action.value)}">'
            f'<td class="num">{d.seq}</td>'
            f"<td>{esc(_when(d.event_time))}</td>"
            f'<td class="num">+{esc(_duration(max(0, d.event_time - start) / 1000))}</td>'
            f"<td>{_badge(d.action.value)}</td>"
            f"<td>{esc(d.detector)}</td><td>{esc(d.severity)}</td>"
            f"<td>{esc(d.tool_name)}</td>"
            f'<td class="num">{d.count}</td>'
            f'<td class="reason">{esc(d.reason)}'
            f'<div class="muted small">{esc(" · ".join(x for x in detail if x))}</div>{extra}</td>'
            "</tr>"
        )
    if not rows:
        rows.append(
            '<tr class="empty"><td colspan="9">no decisions recorded for this run</td></tr>'
        )
    history = f"/runs/{quote(timeline.run_id, safe='')}/history"
    body = f"""<h2>Run <code id="run-id">{esc(timeline.run_id)}</code></h2>
<section class="cards"><div class="card" id="run-summary">{_dl(items)}</div></section>
<p class="note" id="trail-note">{esc(TRAIL_NOTE)}</p>
<h2>Timeline</h2>
<div class="chart-wrap">{render_seq_strip(timeline)}</div>
<table id="timeline">
<thead><tr><th class="num">seq</th><th>event time (UTC)</th><th class="num">since start</th>
<th>action</th><th>detector</th><th>severity</th><th>tool</th><th class="num">count</th>
<th>reason</th></tr></thead>
<tbody>
{"".join(rows)}
</tbody></table>
<p class="small"><a href="{esc(history)}">this run's decisions as JSON</a></p>"""
    return _page(f"loopguard run {timeline.run_id}", _header(app_id, now_ms, "run timeline") + body)


# --------------------------------------------------------------------------- plumbing


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


async def _call_health(health: HealthProvider | None) -> dict[str, Any]:
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
    """A file shipped in ``streams/worker/static`` and its content type, or None."""
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or "\\" in name or name.startswith(".") or suffix not in STATIC_TYPES:
        return None
    resource = resources.files("streams.worker").joinpath("static", name)
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
) -> WorkerMetrics:
    """Add the loopguard pages to a Faust app's web server; returns the metrics it serves.

    ``metrics``: the worker's :class:`WorkerMetrics` (a fresh, idle one if not given).
    ``health``: called on every ``/healthz`` and status page; returns fields merged into
    ``/healthz``'s JSON (e.g. ``{"status": "degraded", "lag": 1200}``). ``status`` other
    than ``ok``/``degraded`` makes ``/healthz`` answer 503; a provider that raises does too.
    ``clock_ms``: wall clock in epoch ms that time windows ("15m") count back from; tests
    pin it so a window does not drift past fixtures during a long run.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from streams.settings import redact_url

    store = _Store(db_url)
    started = time.time()
    now = clock_ms if clock_ms is not None else (lambda: int(time.time() * 1000))
    served = metrics if metrics is not None else WorkerMetrics()
    shown_url = redact_url(db_url)

    async def db_state() -> str:
        try:
            await store.run(lambda s: s.decision_count())
            return "ok"
        except Exception as exc:  # any driver error means "not reachable" here
            return _db_error(exc)

    @app.page("/healthz", name="loopguard-healthz")
    class Healthz(web.View):
        async def get(self, request: web.Request) -> web.Response:
            body: dict[str, Any] = {
                "status": "ok",
                "app_id": app.conf.id,
                "db": await db_state(),
                "db_url": shown_url,
                "uptime_seconds": round(time.time() - started, 1),
            }
            body.update(await _call_health(health))
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
                q = status_query(request.query)
            except BadRequest as exc:
                return self.text(str(exc), status=400)
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
                health=await _call_health(health),
                now_ms=now_ms,
            )
            return self.html(text, status=503 if error else 200, headers=dict(HTML_HEADERS))

    @app.page("/status/run", name="loopguard-status-run")
    class StatusRun(web.View):
        async def get(self, request: web.Request) -> web.Response:
            run_id = request.query.get("id")
            if not run_id:
                return self.text("id: the run id is required (/status/run?id=RUN)", status=400)
            try:
                timeline = await store.run(lambda s: queries.run_timeline(s, run_id))
            except SQLAlchemyError as exc:
                return self.text(_db_error(exc), status=503)
            known = timeline.decisions or timeline.progress is not None
            text = render_run(timeline, app_id=str(app.conf.id), now_ms=now())
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


__all__ = [
    "BadRequest",
    "HealthProvider",
    "StatusQuery",
    "register_views",
    "render_run",
    "render_status",
    "runs_filters",
    "status_query",
    "summary_dict",
]
