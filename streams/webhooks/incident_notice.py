"""The webhook notice of a loop incident opening (issue 28): Slack-compatible like a
decision's notice, posted once per incident id (the outbox key ``incident:<id>``), to the
default receiver (``LOOPGUARD_WEBHOOK_URL``: an incident spans agents)."""

from __future__ import annotations

import json
from typing import Any

from streams.audit.webhook_outbox import Notice
from streams.core.incidents import Incident
from streams.webhooks.slack_blocks import slack_message

INCIDENT_ACTION = "incident"
SHOWN_RUNS = 20


def incident_body(incident: Incident) -> dict[str, Any]:
    """Slack's ``text`` plus ``blocks``: a header, the label, one field each for tool,
    runs, agents and window, the runs it spans (the first 20) and the incident id."""
    runs, agents = len(incident.runs), len(incident.agents)
    text = (
        f"loopguard incident {incident.incident_id}: {runs} runs of {agents} agents loop on "
        f"{incident.tool} ({incident.label}) within {incident.window_seconds} s"
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
    return slack_message(
        text=text,
        header=f"loopguard incident: {runs} runs loop on {incident.tool}",
        lead=incident.label,
        fields=fields,
        trailing=(f"Runs: {shown}",),
        context=f"incident {incident.incident_id}",
    )


def incident_notice(incident: Incident) -> Notice:
    """The outbox entry of an incident's opening: one post whichever worker records it."""
    return Notice(
        decision_id=f"incident:{incident.incident_id}",
        run_id=incident.runs[0] if incident.runs else "",
        agent_id="",
        action=INCIDENT_ACTION,
        body=json.dumps(incident_body(incident), ensure_ascii=False),
    )
