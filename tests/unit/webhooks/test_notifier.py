"""Webhook notifications against a real local HTTP server (aiohttp's test server on loopback)
and a real audit database: what is posted, how failures are retried, and that one decision
is never posted twice nor a dead endpoint allowed to hold up the caller."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from streams.audit import webhook_outbox as outbox
from streams.audit.store import AuditStore
from streams.audit.writer import AuditWriter
from streams.core.events import Action, Decision
from streams.observability.metrics import WorkerMetrics
from streams.settings import Settings
from streams.webhooks.notifier import (
    DECISION_HEADER,
    WebhookNotifier,
    WebhookTargets,
    describe_url,
    slack_body,
)
from streams.webhooks.receiver_queue import parse_retry_after


def decision(seq: int, action: Action = Action.BLOCK, **overrides: Any) -> Decision:
    values: dict[str, Any] = {
        "run_id": "run-1",
        "agent_id": "coder",
        "gateway_id": "gw-1",
        "seq": seq,
        "event_time": 1_700_000_000_000 + seq,
        "action": action,
        "detector": "generic_repeat",
        "severity": "critical" if action is not Action.WARN else "warning",
        "count": 20,
        "tool_name": "read_file",
        "reason": "CRITICAL: Called read_file with identical arguments 20 times.",
    }
    values.update(overrides)
    return Decision(**values)


@dataclass
class Endpoint:
    """A local HTTP server that records every POST and answers from a script of statuses
    (200 once the script is used up); ``hang`` makes it never answer."""

    statuses: list[int] = field(default_factory=list)
    hang: bool = False
    retry_after: str | None = None  # sent with every answer that is not a 2xx
    posts: list[tuple[float, dict[str, str], Any]] = field(default_factory=list)
    server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.posts.append((time.monotonic(), dict(request.headers), await request.json()))
        if self.hang:
            await asyncio.sleep(3600)
        status = self.statuses.pop(0) if self.statuses else 200
        headers = {"Retry-After": self.retry_after} if self.retry_after and status > 299 else {}
        return web.Response(status=status, headers=headers)

    async def __aenter__(self) -> Endpoint:
        app = web.Application()
        app.router.add_post("/hook/secret-token", self.handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self.server is not None
        await self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/hook/secret-token"))

    def ids(self) -> list[str]:
        return [headers[DECISION_HEADER] for _, headers, _ in self.posts]


async def wait_until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def statuses(db_url: str) -> dict[str, tuple[str, int]]:
    with AuditStore(db_url) as store, store.engine.connect() as conn:
        rows = conn.execute(
            outbox.select(outbox.WebhookDelivery.decision_id, outbox.WebhookDelivery.status)
        )
        found = {decision_id: status for decision_id, status in rows}
        attempts = dict(
            conn.execute(
                outbox.select(outbox.WebhookDelivery.decision_id, outbox.WebhookDelivery.attempts)
            ).all()
        )
    return {k: (v, attempts[k]) for k, v in found.items()}


def sent(metrics: WorkerMetrics, outcome: str = "sent") -> float:
    found = metrics.registry.get_sample_value(
        "loopguard_webhook_notifications_total", {"outcome": outcome}
    )
    return found or 0.0


def notifier_for(
    url: str, db_url: str, metrics: WorkerMetrics | None = None, **options: Any
) -> WebhookNotifier:
    options = {"backoff": 0.05, "max_backoff": 0.2, "timeout": 2.0, **options}
    return WebhookNotifier(WebhookTargets(url), AuditWriter(db_url), metrics, **options)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), timeout=90))


async def running(notifier: WebhookNotifier) -> asyncio.Task[None]:
    task = asyncio.create_task(notifier.run())
    await asyncio.sleep(0)
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# -- the body -------------------------------------------------------------------------------


def test_body_is_slack_shaped_with_every_field() -> None:
    d = decision(7, Action.ABORT, error_code="loop_persisted_after_block", tool_name="a<b>&c")
    body = slack_body(d)
    assert set(body) == {"text", "blocks"}
    assert body["text"].startswith("loopguard aborted run run-1 (agent coder, gateway gw-1)")
    assert "a&lt;b&gt;&amp;c" in body["text"]  # Slack's three escapes
    kinds = [block["type"] for block in body["blocks"]]
    assert kinds == ["header", "section", "section", "context"]
    fields = [f["text"] for f in body["blocks"][2]["fields"]]
    assert fields == [
        "*Run*\nrun-1",
        "*Agent*\ncoder",
        "*Gateway*\ngw-1",
        "*Detector*\ngeneric_repeat",
        "*Action*\nabort",
        "*Tool*\na&lt;b&gt;&amp;c",
    ]
    context = body["blocks"][3]["elements"][0]["text"]
    assert d.decision_id in context.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert "loop_persisted_after_block" in context
    assert len(body["blocks"][0]["text"]["text"]) <= 150  # Slack's header limit


def test_long_values_are_clipped_to_slack_limits() -> None:
    body = slack_body(decision(1, reason="x" * 10_000, run_id="r" * 5_000))
    assert len(body["text"]) <= 3000
    assert len(body["blocks"][1]["text"]["text"]) <= 2900
    assert all(len(f["text"]) <= 2000 for f in body["blocks"][2]["fields"])


# -- targets and settings -------------------------------------------------------------------


def test_url_per_agent_overrides_the_default_and_empty_turns_an_agent_off() -> None:
    settings = Settings(
        webhook_url="https://hooks.example/default",
        webhook_urls=json.dumps({"coder": "http://127.0.0.1:9/coder", "quiet": ""}),
    )
    targets = WebhookTargets.from_settings(settings)
    assert targets.url_for("coder") == "http://127.0.0.1:9/coder"
    assert targets.url_for("quiet") is None
    assert targets.url_for("anyone") == "https://hooks.example/default"
    only_map = WebhookTargets.from_settings(Settings(webhook_urls='{"coder": "http://h/x"}'))
    assert only_map.enabled and only_map.url_for("other") is None
    assert not WebhookTargets.from_settings(Settings()).enabled


@pytest.mark.parametrize(
    ("url", "urls", "message"),
    [
        ("", "{not json", "LOOPGUARD_WEBHOOK_URLS is not JSON"),
        ("", '["http://h/x"]', "JSON object"),
        ("", '{"a": 1}', "JSON object"),
        ("ftp://h/x", "", "LOOPGUARD_WEBHOOK_URL: not an http"),
        ("", '{"a": "nohost"}', "LOOPGUARD_WEBHOOK_URLS['a']"),
    ],
)
def test_bad_webhook_settings_are_refused_naming_the_variable(
    url: str, urls: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        WebhookTargets.from_settings(Settings(webhook_url=url, webhook_urls=urls))


def test_webhook_urls_are_secrets_in_logs() -> None:
    settings = Settings(webhook_url="https://hooks.slack.com/services/T0/B0/TOKEN")
    assert settings.redacted()["webhook_url"] == "***"
    assert "TOKEN" not in describe_url(settings.webhook_url)
    assert describe_url("https://user:pw@hooks.example:8443/x") == "https://hooks.example:8443/…"


def test_no_url_means_no_notifier(db_url: str) -> None:
    assert WebhookNotifier.from_settings(Settings(), AuditWriter(db_url)) is None


# -- delivery -------------------------------------------------------------------------------


def test_block_and_abort_are_posted_once_each_and_warnings_never(db_url: str) -> None:
    metrics = WorkerMetrics()

    async def scenario() -> None:
        async with Endpoint() as endpoint:
            notifier = notifier_for(endpoint.url, db_url, metrics)
            task = await running(notifier)
            decisions = [decision(1, Action.WARN), decision(2), decision(3, Action.ABORT)]
            assert await notifier.submit(decisions) == 2
            await wait_until(lambda: len(endpoint.posts) == 2)
            await wait_until(lambda: sent(metrics) == 2)
            await stop(task)
        assert sorted(endpoint.ids()) == sorted(d.decision_id for d in decisions[1:])
        for _, headers, body in endpoint.posts:
            assert headers["Content-Type"].startswith("application/json")
            assert set(body) == {"text", "blocks"}
        assert statuses(db_url) == {d.decision_id: ("sent", 1) for d in decisions[1:]}
        assert (
            metrics.registry.get_sample_value(
                "loopguard_webhook_notifications_total", {"outcome": "sent"}
            )
            == 2
        )

    run(scenario)


def test_observe_only_decisions_are_never_posted(db_url: str) -> None:
    """Shadow mode (mode "observe") is quiet: its blocks and aborts stay in the trail only."""
    metrics = WorkerMetrics()

    async def scenario() -> None:
        async with Endpoint() as endpoint:
            notifier = notifier_for(endpoint.url, db_url, metrics)
            task = await running(notifier)
            observed = [
                decision(1, enforced=False),
                decision(2, Action.ABORT, enforced=False),
            ]
            assert await notifier.submit(observed) == 0
            enforced = decision(3, Action.ABORT)
            assert await notifier.submit([*observed, enforced]) == 1
            await wait_until(lambda: sent(metrics) == 1)
            await stop(task)
        assert endpoint.ids() == [enforced.decision_id]
        assert statuses(db_url) == {enforced.decision_id: ("sent", 1)}

    run(scenario)


def test_server_errors_are_retried_with_growing_backoff(db_url: str) -> None:
    metrics = WorkerMetrics()

    async def scenario() -> None:
        async with Endpoint(statuses=[500, 503, 500]) as endpoint:
            notifier = notifier_for(endpoint.url, db_url, metrics, backoff=0.1, max_backoff=1)
            task = await running(notifier)
            await notifier.submit([decision(5)])
            await wait_until(
                lambda: statuses(db_url).get(decision(5).decision_id, ("",))[0] == "sent"
            )
            await stop(task)
        times = [t for t, _, _ in endpoint.posts]
        assert len(times) == 4
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert gaps[0] >= 0.1 and gaps[1] >= 0.2 and gaps[2] >= 0.4  # doubles each time
        assert set(endpoint.ids()) == {decision(5).decision_id}
        assert statuses(db_url) == {decision(5).decision_id: ("sent", 4)}
        assert metrics.registry.get_sample_value("loopguard_webhook_retries_total") == 3

    run(scenario)


def test_gives_up_after_its_attempts_and_never_retries_a_client_error(db_url: str) -> None:
    metrics = WorkerMetrics()

    async def scenario() -> None:
        async with Endpoint(statuses=[500] * 10 + [400]) as endpoint:
            notifier = notifier_for(endpoint.url, db_url, metrics, attempts=3, senders=1)
            task = await running(notifier)
            await notifier.submit([decision(1)])
            await wait_until(lambda: len(statuses(db_url)) == 1)
            await wait_until(lambda: statuses(db_url)[decision(1).decision_id][0] == "failed")
            assert len(endpoint.posts) == 3
            endpoint.statuses = [400]
            await notifier.submit([decision(2)])
            await wait_until(lambda: sent(metrics, "failed") == 2)
            await stop(task)
        assert len(endpoint.posts) == 4  # the 400 was tried once
        assert statuses(db_url)[decision(2).decision_id] == ("failed", 1)
        assert (
            metrics.registry.get_sample_value(
                "loopguard_webhook_notifications_total", {"outcome": "failed"}
            )
            == 2
        )

    run(scenario)


def test_never_twice_for_one_decision_id_even_across_a_restart(db_url: str) -> None:
    async def scenario() -> None:
        async with Endpoint() as endpoint:
            first = notifier_for(endpoint.url, db_url)
            task = await running(first)
            await first.submit([decision(1), decision(1)])  # republished within a batch
            await first.submit([decision(1)])  # redelivered later
            await wait_until(lambda: len(endpoint.posts) == 1)
            await wait_until(lambda: statuses(db_url)[decision(1).decision_id][0] == "sent")
            await stop(task)

            # Recorded but not posted when the worker stopped: the next worker posts it.
            await first.submit([decision(2)])
            assert statuses(db_url)[decision(2).decision_id] == ("pending", 0)

            second = notifier_for(endpoint.url, db_url)  # a restarted worker, same database
            task = await running(second)
            await second.submit([decision(1), decision(2)])  # Kafka redelivers both
            await wait_until(lambda: statuses(db_url)[decision(2).decision_id][0] == "sent")
            await stop(task)
        assert sorted(endpoint.ids()) == sorted([decision(1).decision_id, decision(2).decision_id])

    run(scenario)


def test_two_senders_racing_for_one_pending_row_post_it_once(db_url: str) -> None:
    async def scenario() -> None:
        async with Endpoint() as endpoint:
            idle = notifier_for(endpoint.url, db_url)
            await idle.submit([decision(9)])  # pending, queued in a worker that is not sending
            a, b = notifier_for(endpoint.url, db_url), notifier_for(endpoint.url, db_url)
            tasks = [await running(a), await running(b)]  # both resume the same pending row
            await wait_until(lambda: statuses(db_url)[decision(9).decision_id][0] == "sent")
            for task in tasks:
                await stop(task)
        assert endpoint.ids() == [decision(9).decision_id]

    run(scenario)


def test_a_dead_endpoint_never_blocks_the_caller_and_overflow_is_counted(db_url: str) -> None:
    metrics = WorkerMetrics()

    async def scenario() -> None:
        async with Endpoint(hang=True) as endpoint:
            notifier = notifier_for(
                endpoint.url, db_url, metrics, queue_size=5, senders=2, timeout=60
            )
            task = await running(notifier)
            for batch in range(10):
                await notifier.submit([decision(batch * 10 + i) for i in range(10)])
            await wait_until(lambda: len(endpoint.posts) == 2)  # both senders are stuck
            # Every notice was queued or dropped while the two first posts still hang (an
            # hour; the client gives up after 60 s): a submit that had waited on the endpoint
            # would have let a post time out first, and a retry or a failure would show.
            unanswered = statuses(db_url)
            await stop(task)
        assert len(endpoint.posts) == 2, "a post was retried: submit waited on the endpoint"
        assert not {"sent", "failed"} & {status for status, _ in unanswered.values()}
        found = [status for status, _ in statuses(db_url).values()]
        assert len(found) == 100
        # 5 fit the queue at first, then 2 more as the senders took theirs; the rest dropped.
        assert found.count("dropped") >= 100 - 5 - 2
        dropped = metrics.registry.get_sample_value(
            "loopguard_webhook_notifications_total", {"outcome": "dropped"}
        )
        assert dropped == found.count("dropped")
        assert metrics.registry.get_sample_value("loopguard_webhook_queue") <= 5

    run(scenario)


def test_an_unreachable_endpoint_is_retried_then_failed(db_url: str) -> None:
    async def scenario() -> None:
        async with Endpoint() as endpoint:
            url = endpoint.url
        # the server is gone: connection refused on that port
        notifier = notifier_for(url, db_url, attempts=2)
        task = await running(notifier)
        await notifier.submit([decision(1)])
        await wait_until(lambda: len(statuses(db_url)) == 1)
        await wait_until(lambda: statuses(db_url)[decision(1).decision_id][0] == "failed")
        await stop(task)
        assert statuses(db_url)[decision(1).decision_id] == ("failed", 2)
        with AuditStore(db_url) as store, store.engine.connect() as conn:
            error = conn.execute(outbox.select(outbox.WebhookDelivery.last_error)).scalar_one()
        assert "secret-token" not in error

    run(scenario)


# -- Retry-After and one queue per receiver (issue 26, item 9) ------------------------------


def test_retry_after_is_read_as_seconds_or_an_http_date_and_bounded() -> None:
    now = 1_700_000_000.0  # 2023-11-14 22:13:20 GMT
    assert parse_retry_after("120", maximum=600) == 120
    assert parse_retry_after("120") == 60  # MAX_RETRY_AFTER_S, the default bound
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:50 GMT", now=now) == 30
    assert parse_retry_after("Tue, 14 Nov 2023 23:13:20 GMT", maximum=60, now=now) == 60
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=now) == 0  # already past
    for unreadable in (None, "", "soon", "-5", "1.5", "Tue, 14 Nov 2023 22:13:50"):
        assert parse_retry_after(unreadable, now=now) is None, unreadable


@pytest.mark.parametrize(
    ("status", "retry_after", "options"),
    [
        (429, "0", {}),
        (503, "Wed, 21 Oct 2015 07:28:00 GMT", {}),  # a date already past: now
        (503, "86400", {"max_retry_after": 0.01}),  # a day, bounded by the maximum
    ],
)
def test_the_receivers_retry_after_replaces_the_backoff(
    db_url: str, status: int, retry_after: str, options: dict[str, float]
) -> None:
    """The backoff here is an hour: the retry can only come this soon by the receiver's word."""

    async def scenario() -> None:
        async with Endpoint(statuses=[status], retry_after=retry_after) as endpoint:
            notifier = notifier_for(endpoint.url, db_url, backoff=3600, max_backoff=3600, **options)
            task = await running(notifier)
            await notifier.submit([decision(1)])
            await wait_until(
                lambda: statuses(db_url).get(decision(1).decision_id, ("",))[0] == "sent"
            )
            await stop(task)
        assert statuses(db_url) == {decision(1).decision_id: ("sent", 2)}
        assert endpoint.ids() == [decision(1).decision_id] * 2

    run(scenario)


def test_a_receiver_that_keeps_failing_never_delays_the_others(db_url: str) -> None:
    """It asks for an hour between tries (honoured, bounded at an hour here) and its notices
    came first; every sender of a shared pool would be parked on it."""

    with AuditStore(db_url) as store:  # as a worker does at start (CI saw PostgreSQL's
        store.migrate()  # migration under load use up the wait for the 4 posts below)

    async def scenario() -> None:
        failing_endpoint = Endpoint(statuses=[503] * 100, retry_after="3600")
        async with failing_endpoint as failing, Endpoint() as healthy:
            targets = WebhookTargets(healthy.url, {"flaky": failing.url})
            notifier = WebhookNotifier(
                targets, AuditWriter(db_url), queue_size=5, max_retry_after=3600
            )
            task = await running(notifier)
            flaky = [decision(i, agent_id="flaky", run_id="run-f") for i in range(10)]
            assert await notifier.submit(flaky) == 5  # its own queue, full: the rest dropped
            await wait_until(lambda: len(failing.posts) == 4)  # its 4 senders are waiting
            fine = [decision(i) for i in range(5)]
            assert await notifier.submit(fine) == 5
            await wait_until(lambda: len(healthy.posts) == 5)
            await wait_until(
                lambda: all(statuses(db_url).get(d.decision_id, ("",))[0] == "sent" for d in fine)
            )
            assert len(failing.posts) == 4  # still parked on their Retry-After
            await stop(task)
        assert sorted(healthy.ids()) == sorted(d.decision_id for d in fine)

    run(scenario)


def test_a_receiver_that_hangs_never_delays_the_others_even_with_one_sender(db_url: str) -> None:
    async def scenario() -> None:
        async with Endpoint(hang=True) as stuck, Endpoint() as healthy:
            targets = WebhookTargets(healthy.url, {"stuck": stuck.url})
            notifier = WebhookNotifier(targets, AuditWriter(db_url), senders=1, timeout=3600)
            task = await running(notifier)
            await notifier.submit([decision(i, agent_id="stuck", run_id="run-s") for i in range(3)])
            await wait_until(lambda: len(stuck.posts) == 1)
            fine = [decision(i) for i in range(3)]
            await notifier.submit(fine)
            await wait_until(lambda: len(healthy.posts) == 3)
            assert len(stuck.posts) == 1
            await stop(task)
        assert sorted(healthy.ids()) == sorted(d.decision_id for d in fine)

    run(scenario)
