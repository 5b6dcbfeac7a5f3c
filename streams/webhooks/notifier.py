"""Webhook notifications of block and abort decisions (Slack-compatible JSON).

Why it is built this way:

- **Fed from the control topic**, by the audit agent, after the batch's decisions are in the
  audit trail: decisions there are durable, so nothing depends on the guard agent's timing,
  and the guard agent (``guard_runs``) never waits for a webhook.
- **Never blocks the stream**: :meth:`WebhookNotifier.submit` records the notices in the
  ``webhook_deliveries`` outbox (the database the audit agent has just written to) and puts
  them on a bounded in-memory queue without waiting; when the queue is full the rest are
  marked ``dropped`` and counted (``loopguard_webhook_notifications_total{outcome="dropped"}``)
  instead of piling up behind an endpoint that is down.
- **Never twice for one decision id** (``Decision.decision_id``): an in-memory memo skips
  repeats cheaply, the outbox's primary key refuses a redelivered decision, and a sender
  *claims* a row before posting, so two senders or two workers never post the same one.
  A row that was mid-post when its worker died is not resent (see
  :mod:`streams.audit.webhook_outbox`); rows still ``pending`` are posted by the next worker.
- **Retried with capped exponential backoff** on connection errors, timeouts, 5xx, 408 and
  429, or when the receiver says (``Retry-After``: seconds or an HTTP date, at most
  ``max_retry_after``); other answers are final.
- **One queue and its own senders per receiver** (:mod:`streams.webhooks.receiver_queue`): a
  receiver that hangs or keeps failing fills and overflows only its own queue, never delays
  the notices of another.

Observe-only decisions (``enforced`` false: the agent's config is ``mode: "observe"``) are
never posted: a shadow-mode rollout is meant to be quiet; the audit trail and the status
page show them instead.

URLs come from settings (``LOOPGUARD_WEBHOOK_URL``, ``LOOPGUARD_WEBHOOK_URLS``: a JSON object
of agent id → URL, where ``""`` turns an agent off); webhook URLs carry tokens, so logs show
only their scheme and host, and the outbox does not store them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from streams.audit import webhook_outbox as outbox
from streams.audit.webhook_outbox import DROPPED, FAILED, SENT, Notice
from streams.audit.writer import AuditWriter
from streams.core.config_change import ConfigChange, alarming
from streams.core.events import RELEASE_DETECTOR, Action, Decision
from streams.core.incidents import Incident
from streams.observability.metrics import WorkerMetrics
from streams.settings import Settings
from streams.webhooks.config_notice import config_change_body, config_change_notice
from streams.webhooks.hold_notice import add_hold, is_held
from streams.webhooks.incident_notice import incident_notice
from streams.webhooks.receiver_queue import (
    DECISION_HEADER,
    MAX_RETRY_AFTER_S,
    ReceiverQueue,
    describe_url,
    post_notice,
)
from streams.webhooks.slack_blocks import slack_message

__all__ = [
    "DECISION_HEADER",
    "NOTIFY_ACTIONS",
    "WebhookNotifier",
    "WebhookTargets",
    "config_change_body",
    "config_change_notice",
    "describe_url",
    "notice_for",
    "slack_body",
]

log = logging.getLogger("loopguard.webhooks")

NOTIFY_ACTIONS = frozenset({Action.BLOCK, Action.ABORT})
USER_AGENT = "loopguard-webhooks/1"


def _check_url(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{where}: not an http(s) URL ({describe_url(url)})")
    return url


class WebhookTargets:
    """Which URL an agent's notifications go to: its own, else the default, else none."""

    def __init__(self, default: str = "", per_agent: Mapping[str, str] | None = None) -> None:
        self.default = _check_url(default, "LOOPGUARD_WEBHOOK_URL") if default else ""
        self.per_agent = {
            agent: _check_url(url, f"LOOPGUARD_WEBHOOK_URLS[{agent!r}]") if url else ""
            for agent, url in (per_agent or {}).items()
        }

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookTargets:
        """Parse the settings; a malformed map is refused at start, naming the variable."""
        per_agent: dict[str, str] = {}
        if settings.webhook_urls.strip():
            try:
                parsed = json.loads(settings.webhook_urls)
            except json.JSONDecodeError as exc:
                raise ValueError(f"LOOPGUARD_WEBHOOK_URLS is not JSON: {exc.msg}") from None
            if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
                raise ValueError("LOOPGUARD_WEBHOOK_URLS must be a JSON object of agent id → URL")
            per_agent = parsed
        return cls(settings.webhook_url, per_agent)

    @property
    def enabled(self) -> bool:
        return bool(self.default) or any(self.per_agent.values())

    def url_for(self, agent_id: str) -> str | None:
        url = self.per_agent.get(agent_id, self.default)
        return url or None

    def urls(self) -> list[str]:
        """Every receiver, once each (the default and the agents' own URLs)."""
        return list(dict.fromkeys(u for u in (self.default, *self.per_agent.values()) if u))


def slack_body(decision: Decision, public_url: str = "") -> dict[str, Any]:
    """The JSON posted for a decision: Slack's ``text`` (the notification line) plus
    ``blocks`` (header, reason, one field each for run, agent, gateway, detector, action and
    tool, and a context line with the decision id). Any JSON receiver can read it too. A
    held block (issue 43) adds what the operator may do and, with ``public_url`` (the web
    UI's address), the release and abort links (hold_notice.py)."""
    action = decision.action.value
    verb = "aborted" if decision.action is Action.ABORT else "blocked"
    if decision.detector == RELEASE_DETECTOR:
        verb = "released"
    tool = decision.tool_name or "-"
    text = (
        f"loopguard {verb} run {decision.run_id} (agent {decision.agent_id}, gateway "
        f"{decision.gateway_id}): {decision.detector} on {tool}. {decision.reason}"
    )
    fields = (
        ("Run", decision.run_id),
        ("Agent", decision.agent_id),
        ("Gateway", decision.gateway_id),
        ("Detector", decision.detector),
        ("Action", action),
        ("Tool", tool),
    )
    context = [f"decision {decision.decision_id}", f"seq {decision.seq}"]
    if decision.error_code:
        context.append(f"error {decision.error_code}")
    if decision.config_version:
        context.append(f"config {decision.config_version}")
    body = slack_message(
        text=text,
        header=f"loopguard {verb} a loop: {decision.detector} on {tool}",
        lead=decision.reason,
        fields=fields,
        context=" · ".join(context),
    )
    return add_hold(body, decision, public_url) if is_held(decision) else body


def notice_for(decision: Decision, public_url: str = "") -> Notice:
    return Notice(
        decision_id=decision.decision_id,
        run_id=decision.run_id,
        agent_id=decision.agent_id,
        action=decision.action.value,
        body=json.dumps(slack_body(decision, public_url), ensure_ascii=False),
    )


def notifies(decision: Decision) -> bool:
    """Whether a decision is posted: an enforced block or abort, or an operator's release
    (issue 43)."""
    posted = decision.action in NOTIFY_ACTIONS or decision.detector == RELEASE_DETECTOR
    return posted and decision.enforced


class WebhookNotifier:
    """Per-receiver bounded queues + background senders posting block/abort notices (see the
    module doc). ``queue_size`` and ``senders`` are per receiver."""

    def __init__(
        self,
        targets: WebhookTargets,
        audit: AuditWriter,
        metrics: WorkerMetrics | None = None,
        *,
        queue_size: int = 1000,
        attempts: int = 6,
        timeout: float = 5.0,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_retry_after: float = MAX_RETRY_AFTER_S,
        senders: int = 4,
        remember: int = 100_000,
        public_url: str = "",
    ) -> None:
        self.targets = targets
        self.audit = audit
        self.metrics = metrics
        self.attempts = max(1, attempts)
        self.timeout = timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.receivers = {url: ReceiverQueue(url, queue_size, senders) for url in targets.urls()}
        self._remember = remember
        self._seen: OrderedDict[str, None] = OrderedDict()  # decision ids already handled
        self._queued: OrderedDict[str, None] = OrderedDict()  # ids this notifier put in a queue
        self._session: aiohttp.ClientSession | None = None
        self.public_url = public_url  # the web UI, for a held block's links (issue 43)

    @classmethod
    def from_settings(
        cls, settings: Settings, audit: AuditWriter, metrics: WorkerMetrics | None = None
    ) -> WebhookNotifier | None:
        """The worker's notifier, or None when no webhook URL is configured."""
        targets = WebhookTargets.from_settings(settings)
        if not targets.enabled:
            return None
        return cls(
            targets,
            audit,
            metrics,
            queue_size=settings.webhook_queue,
            attempts=settings.webhook_attempts,
            timeout=settings.webhook_timeout,
            public_url=settings.web_public_url,
        )

    def queued(self) -> int:
        """Notices waiting, all receivers together."""
        return sum(r.queue.qsize() for r in self.receivers.values())

    # -- fed by the audit agent ---------------------------------------------------------------

    async def submit(self, decisions: Iterable[Decision]) -> int:
        """Record and queue notices for the enforced block/abort decisions not seen before;
        returns how many were queued. Waits only for the outbox insert, never for an endpoint."""
        notices = [
            notice_for(d, self.public_url)
            for d in decisions
            if notifies(d)
            and self.targets.url_for(d.agent_id) is not None
            and self._first_time(d.decision_id)
        ]
        if not notices:
            return 0
        new = set(await self.audit.run("webhook outbox", lambda s: outbox.add(s, notices)))
        if len(new) < len(notices):
            log.info(
                "%d webhook notifications already recorded (a redelivery); not posted again",
                len(notices) - len(new),
            )
        return await self._enqueue([n for n in notices if n.decision_id in new])

    async def submit_config_change(self, change: ConfigChange) -> int:
        """Record and queue the notice of a change that turns guarding off or to observe
        for every agent, or weakens it (issue 40; others are not posted); 1 when queued, 0
        when not."""
        if not alarming(change) or self.targets.url_for(change.agent_key) is None:
            return 0
        notice = config_change_notice(change)
        if not self._first_time(notice.decision_id):
            return 0
        new = await self.audit.run("webhook outbox", lambda s: outbox.add(s, [notice]))
        return await self._enqueue([notice] if notice.decision_id in new else [])

    def _first_time(self, decision_id: str) -> bool:
        if decision_id in self._seen:
            return False
        self._seen[decision_id] = None
        if len(self._seen) > self._remember:
            self._seen.popitem(last=False)
        return True

    async def submit_incidents(self, incidents: Iterable[Incident]) -> int:
        """Record and queue the notice of each incident's opening (issue 28), once per
        incident id, for the default receiver (an incident spans agents)."""
        if self.targets.url_for("") is None:
            return 0
        notices = [
            incident_notice(i) for i in incidents if self._first_time(f"incident:{i.incident_id}")
        ]
        if not notices:
            return 0
        new = set(await self.audit.run("webhook outbox", lambda s: outbox.add(s, notices)))
        return await self._enqueue([n for n in notices if n.decision_id in new])

    async def _enqueue(self, notices: list[Notice]) -> int:
        overflow = []
        for notice in notices:
            receiver = self.receivers.get(self.targets.url_for(notice.agent_id) or "")
            if receiver is None or not receiver.put(notice):
                overflow.append(notice.decision_id)
            else:
                self._queued[notice.decision_id] = None
                if len(self._queued) > self._remember:
                    self._queued.popitem(last=False)
        self._gauge()
        if overflow:
            await self.audit.run("webhook outbox", lambda s: outbox.drop(s, overflow))
            if self.metrics is not None:
                self.metrics.webhook_outcome(DROPPED, len(overflow))
            log.warning(
                "webhook queue full (%d waiting): dropped %d notifications",
                self.queued(),
                len(overflow),
            )
        return len(notices) - len(overflow)

    # -- the background senders ---------------------------------------------------------------

    async def run(self) -> None:
        """Post queued notices until cancelled (a Faust app task)."""
        async with aiohttp.ClientSession(headers={"User-Agent": USER_AGENT}) as session:
            self._session = session
            try:
                await self._resume()
                for receiver in self.receivers.values():
                    receiver.start(self._send_one, self._gauge)
                await asyncio.Event().wait()  # until cancelled
            finally:
                for receiver in self.receivers.values():
                    await receiver.stop()
                self._session = None

    async def _resume(self) -> None:
        """Queue what an earlier worker recorded but never posted."""
        counts = await self.audit.run("webhook outbox", outbox.count_by_status)
        if counts.get(outbox.SENDING):
            log.warning(
                "%d webhook notifications were being posted when a worker stopped; "
                "not resent (never twice for one decision)",
                counts[outbox.SENDING],
            )
        room = sum(r.room() for r in self.receivers.values())
        if counts.get(outbox.PENDING) and room > 0:
            left = await self.audit.run("webhook outbox", lambda s: outbox.pending(s, room))
            # Not what this worker queued itself meanwhile (a submit before the senders
            # started): queued twice, it found its own queue full and was marked dropped.
            left = [notice for notice in left if notice.decision_id not in self._queued]
            for notice in left:
                self._first_time(notice.decision_id)
            queued = await self._enqueue(left)
            log.info("resuming %d queued webhook notifications", queued)

    async def _send_one(self, notice: Notice) -> None:
        key = notice.decision_id
        if not await self.audit.run("webhook claim", lambda s: outbox.claim(s, key)):
            return  # already posted, or another sender / worker has it
        url = self.targets.url_for(notice.agent_id)
        if url is None or self._session is None:  # the agent's webhook was turned off since
            status, attempts, error = FAILED, 0, "no webhook URL for this agent"
        else:
            status, attempts, error = await self._deliver(self._session, url, notice)
        await self.audit.run(
            "webhook result", lambda s: outbox.finish(s, key, status, attempts, error)
        )
        if self.metrics is not None:
            self.metrics.webhook_outcome(status)
        if status == SENT:
            log.info("webhook sent for %s %s (attempt %d)", notice.action, key, attempts)
        else:
            log.warning(
                "webhook for %s %s failed after %d attempts: %s",
                notice.action,
                key,
                attempts,
                error,
            )

    async def _deliver(
        self, session: aiohttp.ClientSession, url: str, notice: Notice
    ) -> tuple[str, int, str]:
        """Post, waiting between tries what the receiver asked (``Retry-After``, bounded) or
        else a capped exponential backoff; (status, attempts made, last error)."""
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            result = await post_notice(session, url, notice, self.timeout, self.max_retry_after)
            if result.error is None:
                return SENT, attempt, ""
            if not result.retry or attempt == self.attempts:
                return FAILED, attempt, result.error
            if self.metrics is not None:
                self.metrics.webhook_retry()
            wait = delay if result.retry_after is None else result.retry_after
            log.info(
                "webhook to %s for %s: %s; retry %d in %.1fs%s",
                describe_url(url),
                notice.decision_id,
                result.error,
                attempt,
                wait,
                "" if result.retry_after is None else " (Retry-After)",
            )
            await asyncio.sleep(wait)
            delay = min(delay * 2, self.max_backoff)
        raise AssertionError("unreachable")  # pragma: no cover

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.set_webhook_queue(self.queued())
