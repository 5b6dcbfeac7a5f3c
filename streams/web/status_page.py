"""The ``/status`` page: worker and database cards, filters, the decisions chart, the runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from streams.audit import queries
from streams.audit.canary import CANARY_AGENT
from streams.audit.config_changes import latest_change
from streams.audit.incidents import has_incident_table, list_incidents
from streams.audit.queries import ACTION_ORDER, Chart, Overview, RunLine
from streams.core.config_change import WEAKENED_LABEL, ConfigChange, alarming
from streams.core.incidents import Incident
from streams.core.usage import SAVINGS_METHOD, SAVINGS_METHOD_DOC
from streams.web.incident_card import render_incidents_card
from streams.web.markup import (
    action_badge,
    ago,
    config_text,
    definition_list,
    duration,
    esc,
    header,
    page,
    plain,
    when,
)
from streams.web.params import STATUS_LIMIT, WINDOWS, StatusQuery

HEALTHY = ("ok", "degraded")  # /healthz answers 200 for these, 503 for anything else
# Health fields (``/healthz`` keys) as the status page names them; others lose underscores.
HEALTH_LABELS = {
    "broker_profile": "broker profile",
    "consumer_lag": "consumer lag",
    "last_event_age_seconds": "last event (s ago)",
    "health_error": "health check error",
}


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
            ("uptime", esc(duration(float(snapshot.get("uptime_seconds") or 0)))),
            ("events consumed", esc(str(snapshot.get("events", 0)))),
            ("last event", esc("none yet" if age is None else f"{duration(age)} ago")),
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
        shown |= {"consumer_lag"}  # the health provider's copy of "consumer lag" above
    else:
        items.append(("metrics", "not reported by this worker"))
    for key, value in health.items():
        if key not in shown and key not in ("db", "db_url"):
            items.append((HEALTH_LABELS.get(key, key.replace("_", " ")), plain(value)))
    return (
        f'<div class="card" id="worker-health"><h2>This worker</h2>{definition_list(items)}</div>'
    )


def savings_method() -> str:
    """The saved estimate's method in a line, under the figure (issue 41)."""
    return (
        f'<div class="muted small savings-method">est.: {esc(SAVINGS_METHOD)} '
        f"({esc(SAVINGS_METHOD_DOC)})</div>"
    )


def loop_cost_items(overview: Overview) -> list[tuple[str, str]]:
    """What loops cost (issue 28), once some gateway reports usage: tokens spent while
    looping and the estimate of what blocks and aborts saved, with its method."""
    if not overview.usage_runs:
        return []
    return [
        ("tokens while looping", f'<span id="loop-tokens">{overview.loop_tokens:,}</span>'),
        (
            "saved by block/abort (est.)",
            f'<span id="saved-tokens">{overview.saved_tokens:,}</span> tokens' + savings_method(),
        ),
    ]


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
            *loop_cost_items(overview),
            (
                "last decision",
                esc(
                    f"{when(overview.last_decision_time)} "
                    f"({ago(overview.last_decision_time, now_ms)})"
                    if overview.last_decision_time is not None
                    else "none yet"
                ),
            ),
        ]
    return f'<div class="card" id="db-health"><h2>Audit database</h2>{definition_list(items)}</div>'


def render_config_card(change: ConfigChange | None, now_ms: int) -> str:
    """The newest config change: who, when, what, the version it brought (issue 26); a
    change that turned guarding off or to observe for every agent is shown as bad."""
    if change is None:
        items = [("latest change", "none recorded")]
    else:
        css = "state-bad" if alarming(change) else "state-ok"
        what = change.action + (
            " (guarding off or observe-only for all)"
            if change.disables
            else f" ({WEAKENED_LABEL}: {change.weakened})"
            if change.weakened
            else ""
        )
        value = change.error or readable_config(change.value) or "(removed)"
        items = [
            ("latest change", f'<span class="{css}" id="config-action">{esc(what)}</span>'),
            ("key", esc(change.agent_key)),
            ("by", esc(change.sender)),
            ("when", esc(f"{when(change.changed_at)} ({ago(change.changed_at, now_ms)})")),
            ("value", esc(value if len(value) <= 200 else value[:199] + "…")),
            ("version", esc(f"{change.version_before or '-'} → {change.version_after or '-'}")),
            ("source", esc(change.source)),
        ]
    return f'<div class="card" id="config-change"><h2>Config</h2>{definition_list(items)}</div>'


def readable_config(value: str | None) -> str:
    """A config change's value (a block or a whole file, JSON) as its settings, not JSON."""
    if not value:
        return ""
    try:
        return config_text(json.loads(value))
    except ValueError:
        return value


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
        window_values.insert(0, ("", f"{when(q.since)} – {when(q.until)}"))
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
        tip = f"{when(start)} – {when(start + chart.width_ms)} UTC: " + ", ".join(
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
    per = duration(chart.width_ms / 1000)
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


def render_runs_table(
    lines: list[RunLine], total: int, q: StatusQuery, now_ms: int, hidden: int = 0
) -> str:
    """The runs with loop decisions; ``hidden``: runs of the test loops left out, with a link
    that shows them."""
    rows = []
    for line in lines:
        run_link = f"/status/run?{urlencode({'id': line.run_id})}"
        agent_link = q.href(agent=line.agent_id)
        split = "/".join(str(n) for n in (line.warn, line.block, line.abort))
        if line.observed:
            split += f", {line.observed} observe-only"
        more = f" +{line.detectors - 1}" if line.detectors > 1 else ""
        status = line.status or "–"
        if line.events is not None:
            status = f"{status}, {line.events} event{'' if line.events == 1 else 's'}"
        rows.append(
            f'<tr class="run" data-run="{esc(line.run_id)}">'
            f'<td class="when" title="{esc(when(line.last_seen))} UTC">'
            f"{esc(ago(line.last_seen, now_ms))}</td>"
            f'<td class="id"><a href="{esc(run_link)}">{esc(line.run_id)}</a></td>'
            f'<td class="id"><a href="{esc(agent_link)}">{esc(line.agent_id)}</a></td>'
            f"<td>{action_badge(line.worst_action, line.worst_observed)}</td>"
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
    if hidden:
        more += (
            f' &middot; <a id="show-test-loops" href="{esc(q.href(testloops=1))}">{hidden} '
            f"test loop{'' if hidden == 1 else 's'} of {esc(CANARY_AGENT)} hidden</a>"
        )
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
    incidents: list[Incident] = field(default_factory=list)  # open ones (issue 28)
    latest_config: ConfigChange | None = None  # the newest config change (issue 26)
    hidden_runs: int = 0  # test loops' runs the filters would match, left out (issue 41)


def hidden_runs(store: Any, filters: queries.Filters) -> int:
    """How many runs of the hidden agents the filters would otherwise match."""
    total = 0
    for agent in filters.exclude_agents:
        total += queries.count_runs(store, replace(filters, agent=agent, exclude_agents=()))
    return total


def load_status(store: Any, q: StatusQuery, now_ms: int) -> StatusData:
    """Everything the status page reads from the audit trail (one thread, several queries)."""
    filters = q.filters(now_ms)
    return StatusData(
        overview=queries.trail_overview(store),
        facets=queries.facets(store),
        lines=queries.grouped_runs(store, filters, limit=q.limit),
        total_runs=queries.count_runs(store, filters),
        hidden_runs=hidden_runs(store, filters),
        chart=queries.decision_buckets(store, filters, now_ms),
        top_agents=queries.top_values(store, filters, "agent_id"),
        top_tools=queries.top_values(store, filters, "tool_name"),
        latest_config=latest_change(store),
        incidents=list_incidents(store, open_only=True, limit=20, now_ms=now_ms)
        if has_incident_table(store)
        else [],
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
        + (render_config_card(data.latest_config, now_ms) if data else "")
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
            render_incidents_card(data.incidents, now_ms)
            + render_filters(q, data.facets)
            + "<h2>Decisions over time by action</h2>"
            + render_chart(data.chart, q)
            + tops
            + render_runs_table(data.lines, data.total_runs, q, now_ms, data.hidden_runs)
        )
    footer = (
        '<footer class="muted small">Runs, chart and counts come from the shared audit trail '
        "(the whole fleet); &ldquo;This worker&rdquo; is the worker serving this page. "
        "Times are the gateways&rsquo; event times, in UTC.</footer>"
    )
    return page(
        "loopguard status",
        header(app_id, now_ms, "status") + cards + body + footer,
        refresh=q.refresh,
    )
