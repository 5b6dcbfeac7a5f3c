"""An incident's webhook (issue 28): Slack-shaped, posted once per incident id, to the default
receiver, however many times its records are submitted."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from streams.audit.store import AuditStore
from streams.audit.writer import AuditWriter
from streams.core.incidents import OPEN, Incident
from streams.webhooks.incident_notice import incident_body, incident_notice
from streams.webhooks.notifier import DECISION_HEADER, WebhookNotifier, WebhookTargets

INCIDENT = Incident(
    incident_id="inc-0123456789abcdef",
    signature="abc",
    tool="web_fetch",
    kind="error",
    detail="upstream <n> for <id>",
    status=OPEN,
    window_seconds=60,
    opened_at=60_000,
    last_window=60_000,
    runs=tuple(f"run-{n}" for n in range(25)),
    agents=("a1", "a2", "a3"),
)


def test_the_body_names_tool_signature_counts_and_runs() -> None:
    body = incident_body(INCIDENT)
    assert body["text"].startswith("loopguard incident inc-0123456789abcdef: 25 runs of 3 agents")
    assert "upstream &lt;n&gt; for &lt;id&gt;" in body["blocks"][1]["text"]["text"]
    runs = body["blocks"][3]["text"]["text"]
    assert "run-19" in runs and "run-20" not in runs and "and 5 more" in runs
    notice = incident_notice(INCIDENT)
    assert (notice.decision_id, notice.agent_id) == ("incident:inc-0123456789abcdef", "")


def test_an_incident_is_posted_once_however_often_it_is_submitted(db_url: str) -> None:
    with AuditStore(db_url) as store:
        store.migrate()
    posts: list[tuple[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        posts.append((request.headers[DECISION_HEADER], await request.json()))
        return web.Response()

    async def scenario() -> None:
        app = web.Application()
        app.router.add_post("/hook", handle)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        notifier = WebhookNotifier(
            WebhookTargets(str(server.make_url("/hook"))), AuditWriter(db_url), backoff=0.05
        )
        task = asyncio.create_task(notifier.run())
        grown = replace(INCIDENT, runs=(*INCIDENT.runs, "run-99"))
        assert await notifier.submit_incidents([INCIDENT]) == 1
        assert await notifier.submit_incidents([grown, INCIDENT]) == 0
        deadline = time.monotonic() + 15
        while not posts and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        # a second notifier (a restarted worker) finds it in the outbox: not posted again
        again = WebhookNotifier(WebhookTargets(str(server.make_url("/hook"))), AuditWriter(db_url))
        assert await again.submit_incidents([INCIDENT]) == 0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await server.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert [key for key, _ in posts] == ["incident:inc-0123456789abcdef"]
