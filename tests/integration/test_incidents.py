"""Loop incidents on a real broker (issue 28): six runs of three agents looping on one failing
tool with the same error (different request ids and times in its text) are one incident,
recorded once, posted to the webhook once, shown on /status and by `loopguard incidents`,
closed after a quiet window; `loopguard replay` of the same events finds the same incident."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from services import Pipeline
from test_webhooks import Receiver, receiver, wait_until  # noqa: F401 - the fixture

from streams.audit.incidents import list_incidents
from streams.cli.main import main
from streams.core.events import AgentEvent, Envelope, RunEnded, RunStarted, ToolCall, ToolResult
from streams.core.incidents import CLOSED, OPEN, Incident, close, normalise_error
from streams.gateway.client import GatewayClient

pytestmark = pytest.mark.integration

WINDOW_S = 5
RUNS, AGENTS, CALLS = 6, 3, 4
CONFIG = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "incidents": {
                "enabled": True,
                "windowSeconds": WINDOW_S,
                "minRuns": RUNS,
                "minAgents": AGENTS,
            },
        }
    }
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def failing_runs(client: GatewayClient, base_ms: int, tag: str) -> list[AgentEvent]:
    """Each run calls web_fetch CALLS times and gets the same upstream error, whose request id
    and time differ from run to run; every event inside one window from ``base_ms``."""
    events: list[AgentEvent] = []
    for n in range(RUNS):
        run, agent = f"{tag}-run-{n}", f"{tag}-agent-{n % AGENTS}"
        stamp = datetime.fromtimestamp(base_ms / 1000 + n, UTC).isoformat()
        error = f"Upstream API returned 503 for request req_{uuid.uuid4().hex[:8]} at {stamp}"
        args = json.dumps({"url": f"https://api.example.test/v1/items/{n}"})
        steps: list[tuple[type, dict]] = [(RunStarted, {"trigger": "user"})]
        for call in range(CALLS):
            steps.append((ToolCall, {"tool_name": "web_fetch", "args_json": args}))
            steps[-1][1]["tool_call_id"] = f"c{call}"
            steps.append(
                (ToolResult, {"tool_name": "web_fetch", "args_json": args, "error": error})
            )
        steps.append((RunEnded, {"status": "failed"}))
        for seq, (kind, fields) in enumerate(steps, start=1):
            env = Envelope(run, agent, "gw-incidents", seq, base_ms + 100 * n + seq)
            event = kind(envelope=env, **fields)
            client.publish(event)
            events.append(event)
    client.flush()
    return events


def stored(pipeline: Pipeline) -> list[Incident]:
    with pipeline.store() as store:
        return list_incidents(store)


def found(pipeline: Pipeline, check: Callable[[list[Incident]], bool]) -> Callable[[], bool]:
    return lambda: check(stored(pipeline))


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert main(list(args)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_runs_looping_on_one_failing_tool_are_one_incident(
    pipeline_factory: Callable[..., Pipeline],
    migrated_db_url: str,
    receiver: Receiver,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG, partitions=2)
    port = free_port()
    pipeline.start_worker(web_port=port, LOOPGUARD_WEBHOOK_URL=receiver.url)
    client = pipeline.client()
    pipeline.wait_ready(client)

    # The events carry the start of the next window as their time, so all of them fall in
    # one window whatever the broker's pace, and the quiet window ends two windows later.
    window_ms = WINDOW_S * 1000
    base = (int(time.time() * 1000) // window_ms + 1) * window_ms
    tag = uuid.uuid4().hex[:6]
    events = failing_runs(client, base, tag)
    runs = tuple(sorted({e.envelope.run_id for e in events}))
    agents = tuple(sorted({e.envelope.agent_id for e in events}))

    wait_until(found(pipeline, lambda got: len(got) == 1), "the incident in SQL", pipeline)
    (incident,) = stored(pipeline)
    assert (incident.tool, incident.kind, incident.opened_at) == ("web_fetch", "error", base)
    assert incident.detail == normalise_error(
        "upstream api returned 503 for request req_00000000 at 2026-01-01T00:00:00+00:00"
    )
    assert incident.runs == runs and incident.agents == agents

    # Posted once, to the default receiver, naming the runs.
    key = f"incident:{incident.incident_id}"
    wait_until(lambda: receiver.ids()[key] == 1, "the incident's webhook", pipeline)
    (body,) = [body for posted, body in receiver.posts if posted == key]
    assert f"{RUNS} runs of {AGENTS} agents loop on web_fetch" in body["text"]

    # On /status while open, with its runs (the quiet window ends two windows after base).
    if stored(pipeline)[0].status == OPEN:
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10).read()
        html = page.decode()
        assert "Open incidents" in html and incident.incident_id in html
        assert all(run in html for run in runs)

    listed = cli_json(capsys, "incidents", "--db", migrated_db_url, "--json")
    assert [i["incident_id"] for i in listed] == [incident.incident_id]
    assert listed[0]["runs"] == list(runs)

    # Closed once a whole window passes with no signal of its signature.
    wait_until(
        found(pipeline, lambda got: got[0].status == CLOSED),
        "the incident to close",
        pipeline,
        timeout=60 + 3 * WINDOW_S,
    )
    (closed,) = stored(pipeline)
    assert closed.closed_at == base + 2 * window_ms and closed.runs == runs
    assert cli_json(capsys, "incidents", "--db", migrated_db_url, "--open", "--json") == []
    assert receiver.ids()[key] == 1, "posted again on close"

    # Replay reads the same events from the topic and finds the same incident (open at the
    # end of its input: the quiet window comes after the last event; closed, it is the same).
    config_file = tmp_path / "incidents.json"
    config_file.write_text(json.dumps(CONFIG))
    replayed = cli_json(
        capsys,
        "replay",
        "--broker",
        pipeline.broker.url,
        "--topic-prefix",
        pipeline.prefix,
        "--db",
        migrated_db_url,
        "--config",
        str(config_file),
        "--progress",
        "0",
        "--json",
    )
    (doc,) = replayed
    (again,) = [Incident.from_dict(i) for i in doc["incidents"]]
    assert again.status == OPEN
    assert close(again) == closed
