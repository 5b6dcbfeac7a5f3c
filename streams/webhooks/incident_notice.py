"""The webhook notice of a loop incident opening (issue 28): Slack-compatible like a
decision's notice, posted once per incident id (the outbox key ``incident:<id>``), to the
default receiver (``LOOPGUARD_WEBHOOK_URL``: an incident spans agents)."""

from __future__ import annotations

import json
from typing import Any

from streams.audit.webhook_outbox import Notice
from streams.core.incidents import Incident

INCIDENT_ACTION = "incident"
SHOWN_RUNS = 20


def _esc(text: str, limit: int) -> str:
    """Slack mrkdwn: escape the three control characters and keep within Slack's limits."""
    clipped = text if len(text) <= limit else text[: limit - 1] + "…"
    return clipped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _signature(incident: Incident) -> str:
    what = "error" if incident.kind == "error" else "repeated call"
    return f"{what} {incident.detail}"


def incident_body(incident: Incident) -> dict[str, Any]:
    """Slack's ``text`` plus ``blocks``: a header, the signature, one field each for tool,
    runs, agents and window, the runs it spans (the first 20) and the incident id."""
    runs, agents = len(incident.runs), len(incident.agents)
    text = (
        f"loopguard incident {incident.incident_id}: {runs} runs of {agents} agents loop on "
        f"{incident.tool} ({_signature(incident)}) within {incident.window_seconds} s"
    )
    shown = ", ".join(incident.runs[:SHOWN_RUNS])
    if runs > SHOWN_RUNS:
        shown += f" and {runs - SHOWN_RUNS} more"
    fields = (
        ("Tool", incident.tool),
        ("Runs", str(runs)),
        ("Agents", ", ".join(incident.agents)),
        ("Window", f"{incident.window_seconds} s"),
    )
    return {
        "text": _esc(text, 3000),
        "blocks": [
            {
                "type": "header",
                "text": {
                    "type": "plain_text",
                    "text": f"loopguard incident: {runs} runs loop on {incident.tool}"[:150],
                },
            },
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _esc(_signature(incident), 2900)},
            },
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*{label}*\n{_esc(value or '-', 1900)}"}
                    for label, value in fields
                ],
            },
            {"type": "section", "text": {"type": "mrkdwn", "text": _esc(f"Runs: {shown}", 2900)}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"incident {incident.incident_id}"}],
            },
        ],
    }


def incident_notice(incident: Incident) -> Notice:
    """The outbox entry of an incident's opening: one post whichever worker records it."""
    return Notice(
        decision_id=f"incident:{incident.incident_id}",
        run_id=incident.runs[0] if incident.runs else "",
        agent_id="",
        action=INCIDENT_ACTION,
        body=json.dumps(incident_body(incident), ensure_ascii=False),
    )
