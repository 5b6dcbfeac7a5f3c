"""The demo's loop incident (issue 28): six runs of three agents hit the same broken upstream
API, each is blocked on its own, and the worker records one incident spanning them."""

from __future__ import annotations

import time
from collections.abc import Callable

from streams.audit.incidents import list_incidents
from streams.audit.store import AuditStore
from streams.core.incidents import Incident
from streams.devtools.demo_runs import (
    INCIDENT_AGENTS,
    INCIDENT_RUNS,
    INCIDENT_TITLE,
    Played,
    upstream_outage,
)
from streams.gateway.client import GatewayClient, RunAborted

INCIDENT_TIMEOUT = 30.0  # seconds to wait for the worker's incident record


def incident_of(
    db_url: str, run_ids: set[str], timeout: float = INCIDENT_TIMEOUT
) -> Incident | None:
    """The recorded incident spanning any of these runs, once the worker has written it."""
    deadline = time.monotonic() + timeout
    with AuditStore(db_url) as store:
        while True:
            found = [i for i in list_incidents(store) if run_ids & set(i.runs)]
            if found or time.monotonic() > deadline:
                return found[0] if found else None
            time.sleep(0.2)


def play_incident(client: GatewayClient, tag: str, db_url: str, say: Callable[[str], None]) -> bool:
    """Play the outage's runs one after the other and say what the worker made of them;
    False when no incident was recorded in time."""
    say(f"\n== runs outage1-{tag} .. outage{INCIDENT_RUNS}-{tag}: {INCIDENT_TITLE} ==")
    plays = []
    for number in range(INCIDENT_RUNS):
        agent = INCIDENT_AGENTS[number % len(INCIDENT_AGENTS)]
        play = Played(client.start_run(agent, run_id=f"outage{number + 1}-{tag}"))
        try:
            upstream_outage(play, number)
            play.run.end()
        except RunAborted as aborted:
            play.stopped_by = aborted.decision
            client.flush()
        stopped = f", stopped at seq {play.stopped_by.seq}" if play.stopped_by else ""
        say(
            f"  {play.run.run_id} (agent {agent}): {play.calls} calls, "
            f"{play.refused} refused{stopped}"
        )
        plays.append(play)
    incident = incident_of(db_url, {play.run.run_id for play in plays})
    if incident is None:
        say(f"  no incident recorded within {INCIDENT_TIMEOUT:.0f} s: see the worker log")
        return False
    say(f"  one incident: {incident.tool} failing in runs of {len(incident.agents)} agents with")
    say(f'    "{incident.detail}"')
    say("    (`loopguard incidents` lists it, the status page shows it, webhooks get it once)")
    return True
