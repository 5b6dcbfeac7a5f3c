"""One queue and its own senders per webhook receiver, and one POST with ``Retry-After``.

Why per receiver: with one shared queue and a shared pool of senders, a receiver that hangs or
answers 503 for minutes kept every sender busy retrying it, and the other receivers' notices
waited behind it. Here each receiver (one URL) has a bounded queue and its own senders, so a
failing receiver can only fill (and overflow) its own queue.

Why ``Retry-After``: a receiver that says when to come back (429 or 503 with seconds or an
HTTP date) is asked again then, not at our fixed backoff; the wait is bounded
(``max_retry_after``) so a hostile or broken header cannot park a sender for hours.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import quote, urlsplit

import aiohttp

from streams.audit.webhook_outbox import Notice

log = logging.getLogger("loopguard.webhooks")

RETRY_STATUSES = frozenset({408, 429})
DECISION_HEADER = "X-Loopguard-Decision-Id"  # an idempotency key for receivers that want one
MAX_RETRY_AFTER_S = 60.0  # the longest wait a receiver's Retry-After can ask for


def describe_url(url: str) -> str:
    """What a log may say about a webhook URL: scheme and host only (the path is a secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…" if parts.netloc else "(bad url)"


def parse_retry_after(
    value: str | None, maximum: float = MAX_RETRY_AFTER_S, now: float | None = None
) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), at most
    ``maximum``; None when absent or unreadable (the caller's backoff applies then)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(text), maximum)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; a naive parse is taken as such
        return None
    wait = when.timestamp() - (time.time() if now is None else now)
    return min(max(wait, 0.0), maximum)


@dataclass(frozen=True, slots=True)
class PostResult:
    """What one POST gave: ``error`` None when the receiver took it."""

    retry: bool
    error: str | None
    retry_after: float | None = None  # the receiver's own Retry-After, bounded


async def post_notice(
    session: aiohttp.ClientSession,
    url: str,
    notice: Notice,
    timeout: float,
    max_retry_after: float = MAX_RETRY_AFTER_S,
) -> PostResult:
    """One POST of a notice; retryable on connection errors, timeouts, 5xx, 408 and 429."""
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        DECISION_HEADER: quote(notice.decision_id, safe=":"),  # run ids may be any Unicode
    }
    try:
        async with session.post(
            url,
            data=notice.body.encode("utf-8"),
            headers=headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            await response.read()
            if 200 <= response.status < 300:
                return PostResult(False, None)
            retry = response.status >= 500 or response.status in RETRY_STATUSES
            after = parse_retry_after(response.headers.get("Retry-After"), max_retry_after)
            return PostResult(retry, f"HTTP {response.status}", after if retry else None)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        message = str(exc).replace(url, describe_url(url))[:200]
        return PostResult(
            True, f"{type(exc).__name__}: {message}" if message else type(exc).__name__
        )


class ReceiverQueue:
    """A bounded queue of notices for one receiver, drained by its own sender tasks."""

    def __init__(self, url: str, size: int, senders: int) -> None:
        self.url = url
        self.queue: asyncio.Queue[Notice] = asyncio.Queue(maxsize=max(1, size))
        self.senders = max(1, senders)
        self.tasks: list[asyncio.Task[None]] = []

    def put(self, notice: Notice) -> bool:
        """Queue without waiting; False when the receiver's queue is full."""
        try:
            self.queue.put_nowait(notice)
        except asyncio.QueueFull:
            return False
        return True

    def room(self) -> int:
        return self.queue.maxsize - self.queue.qsize()

    def start(self, send: Callable[[Notice], Awaitable[None]], on_take: Callable[[], None]) -> None:
        """Start the senders (once): each takes a notice and awaits ``send`` for it."""
        if not self.tasks:
            self.tasks = [
                asyncio.create_task(self._sender(send, on_take)) for _ in range(self.senders)
            ]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def _sender(
        self, send: Callable[[Notice], Awaitable[None]], on_take: Callable[[], None]
    ) -> None:
        while True:
            notice = await self.queue.get()
            on_take()
            try:
                await send(notice)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one notice must never end the sender
                log.exception("webhook for decision %s failed unexpectedly", notice.decision_id)
