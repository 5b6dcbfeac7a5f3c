"""The status page's "Open incidents" card (issue 28): each open loop incident with its label,
tool, window and the runs it spans (linked to their run pages)."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlencode

from streams.core.incidents import Incident
from streams.web.markup import ago, esc, when

SHOWN_RUNS = 12


def _runs(incident: Incident) -> str:
    links = [
        f'<a href="/status/run?{esc(urlencode({"id": run}))}" class="incident-run">{esc(run)}</a>'
        for run in incident.runs[:SHOWN_RUNS]
    ]
    more = len(incident.runs) - SHOWN_RUNS
    if more > 0:
        links.append(f'<span class="muted">and {more} more</span>')
    return ", ".join(links)


def render_incidents_card(incidents: Sequence[Incident], now_ms: int) -> str:
    """Open incidents, newest first; says so when there is none."""
    if not incidents:
        body = (
            '<p class="muted" id="no-incidents">none: no tool is failing or looping the same '
            "way in many runs</p>"
        )
    else:
        items = "".join(
            f'<li class="incident" id="{esc(i.incident_id)}"><strong>{esc(i.label)}</strong> '
            f'<span class="muted">{esc(i.tool)}, {esc(i.kind)}</span><br>'
            f"{len(i.runs)} runs of {len(i.agents)} agents ({esc(', '.join(i.agents))}) since "
            f"{esc(when(i.opened_at))} ({esc(ago(i.opened_at, now_ms))}), "
            f"window {i.window_seconds} s<br>runs: {_runs(i)}</li>"
            for i in incidents
        )
        body = f'<ul id="incident-list">{items}</ul>'
    return f'<div class="card" id="open-incidents"><h2>Open incidents</h2>{body}</div>'
