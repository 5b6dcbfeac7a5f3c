"""The ``/status/run`` page: one run's progress and its decisions on a seq strip."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from streams.audit import queries
from streams.audit.queries import Timeline
from streams.core.usage import SAVINGS_METHOD, SAVINGS_METHOD_DOC
from streams.web.markup import (
    action_badge,
    ago,
    definition_list,
    duration,
    esc,
    header,
    page,
    readable,
    when,
)

TRAIL_NOTE = (
    "The audit trail stores each run's decisions and its progress (events processed, last "
    "sequence number, status). Tool calls, results and compactions are not written to the "
    "database, so they are not listed here; a decision's seq places it among the run's events."
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
        if not d.enforced:
            tip += ", observe only"
        parts.append(
            f'<circle class="mark {esc(action)}" cx="{x(d.seq):.1f}" cy="22" r="6" '
            f'fill="{colors.get(action, "#888")}"><title>{esc(tip)}</title></circle>'
        )
    parts.append("</svg>")
    return "".join(parts)


def usage_items(usage: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The run's usage (issue 28): totals, while looping, and what stopping it saved (an
    estimate, its method named); nothing when its gateway reports none."""
    if not usage:
        return []
    tokens = usage["input_tokens"] + usage["output_tokens"]
    cost = f", ${usage['cost_usd']:.4f}" if usage["cost_usd"] else ""
    loop_cost = f", ${usage['loop_cost_usd']:.4f}" if usage["loop_cost_usd"] else ""
    return [
        (
            "tokens",
            esc(
                f"{tokens:,} ({usage['input_tokens']:,} in, {usage['output_tokens']:,} out"
                f"{cost}) over {usage['tool_calls']} calls"
            ),
        ),
        (
            "while looping",
            f'<span id="loop-tokens">{usage["loop_tokens"]:,}</span>'
            + esc(f" tokens{loop_cost}, {usage['loop_calls']} calls"),
        ),
        (
            "saved by block/abort (est.)",
            f'<span id="saved-tokens">{usage["saved_tokens"]:,}</span> tokens'
            + f'<div class="muted small savings-method">est.: {esc(SAVINGS_METHOD)} '
            f"({esc(SAVINGS_METHOD_DOC)})</div>",
        ),
    ]


def render_run(timeline: Timeline, *, app_id: str, now_ms: int, controls: str = "") -> str:
    """One run's page: its progress and its decisions in order, then ``controls`` (the
    operator's release and abort, streams.web.operator_views); every value escaped."""
    progress = timeline.progress
    decisions = timeline.decisions
    first = decisions[0] if decisions else None
    agent = progress.agent_id if progress else first.agent_id if first else ""
    gateway = progress.gateway_id if progress else first.gateway_id if first else ""
    worst = max((d.action.value for d in decisions), key=queries.severity, default=None)
    worst_observed = not any(d.enforced for d in decisions if d.action.value == worst)
    observed = sum(not d.enforced for d in decisions)
    items = [
        ("agent", f'<a href="{esc("/status?" + urlencode({"agent": agent}))}">{esc(agent)}</a>'),
        ("gateway", esc(gateway)),
        ("worst action", action_badge(worst, worst_observed) if worst else "none"),
        ("decisions", esc(str(len(decisions)))),
    ]
    if observed:
        items.append(("observe-only decisions", esc(f"{observed} (mode observe: not enforced)")))
    if progress is not None:
        items += [
            ("status", esc(progress.status)),
            ("events processed", esc(str(progress.events))),
            ("last seq", esc(str(progress.last_seq))),
            ("first event", esc(f"{when(progress.first_event_time)} UTC")),
            (
                "last event",
                esc(
                    f"{when(progress.last_event_time)} UTC "
                    f"({ago(progress.last_event_time, now_ms)})"
                ),
            ),
        ]
    else:
        items.append(("progress", "no progress record for this run"))
    items += usage_items(timeline.usage)
    start = progress.first_event_time if progress else decisions[0].event_time if decisions else 0
    rows = []
    for d in decisions:
        extra = ""
        if d.extra:
            extra = f'<div class="muted small extra">{readable(d.extra)}</div>'
        detail = [
            f"paired with {d.paired_tool_name}" if d.paired_tool_name else "",
            f"error {d.error_code}" if d.error_code else "",
            f"config {d.config_version}" if d.config_version else "",
        ]
        rows.append(
            f'<tr class="decision {esc(d.action.value)}{"" if d.enforced else " observed"}">'
            f'<td class="num">{d.seq}</td>'
            f"<td>{esc(when(d.event_time))}</td>"
            f'<td class="num">+{esc(duration(max(0, d.event_time - start) / 1000))}</td>'
            f"<td>{action_badge(d.action.value, not d.enforced)}</td>"
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
<section class="cards"><div class="card" id="run-summary">{definition_list(items)}</div></section>
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
{controls}
<p class="small"><a href="{esc(history)}">this run's decisions as JSON</a></p>"""
    return page(f"loopguard run {timeline.run_id}", header(app_id, now_ms, "run timeline") + body)
