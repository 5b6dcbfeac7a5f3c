"""Broker-client and consumer-loop settings Faust does not expose.

Fetch wait: Faust hard-codes ``fetch_max_wait_ms=1500`` for the worker's consumer. Apache
Kafka answers a fetch as soon as data arrives, but the tansu broker holds an empty fetch for
the whole wait, so a decision could sit unseen for up to 1.5 s. loopguard shortens the wait
(``LOOPGUARD_FETCH_MAX_WAIT_MS``); against Kafka a short wait only costs a few more idle
fetch requests.

Per-message hand-off: for every fetched message Faust's consumer runs
``wait_first(deliver(message), suspend_flow.wait())``, which wraps both (plus its own
stopped/crashed events) in four tasks and an ``asyncio.wait`` - the largest single cost of a
worker (about a sixth of its CPU in a profile of bench/e2e_bench.py). Delivery normally
finishes without ever suspending (the stream's buffer has room), so
:func:`fast_message_handoff` runs it one step first and only falls back to the full
``wait_first``, with the delivery resumed where it paused, when it really has to wait. While
flow is suspended (rebalance) or the consumer is stopping, the original path runs unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.services import WaitResults

_original = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer
_original_wait_first = faust_consumer.Consumer.wait_first
_EVENT_WAIT = asyncio.Event.wait.__code__


def set_fetch_max_wait(ms: int) -> None:
    def create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = _original(self, transport)
        consumer._fetch_max_wait_ms = ms
        return consumer

    faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = create_worker_consumer


class _Resumed:
    """Awaitable finishing a coroutine that was already run one step and yielded ``pending``."""

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self.coro, self.pending = coro, pending

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, pending = self.coro, self.pending
        while True:
            try:
                value = yield pending
            except BaseException as exc:  # cancellation and friends go to the coroutine
                try:
                    pending = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                pending = coro.send(value)
            except StopIteration as stop:
                return stop.value


async def _wait_first(self: Any, *coros: Any, timeout: Any = None) -> Any:
    is_handoff = (
        len(coros) == 2
        and timeout is None
        and asyncio.iscoroutine(coros[0])
        and getattr(coros[1], "cr_code", None) is _EVENT_WAIT
        and not self.suspend_flow.is_set()
        and not self._stopped.is_set()
        and not self._crashed.is_set()
    )
    if not is_handoff:
        return await _original_wait_first(self, *coros, timeout=timeout)
    deliver, flow_wait = coros
    try:
        pending = deliver.send(None)
    except StopIteration as stop:
        flow_wait.close()
        return WaitResults([deliver], [stop.value], False)
    return await _original_wait_first(self, _Resumed(deliver, pending), flow_wait)


def fast_message_handoff() -> None:
    faust_consumer.Consumer.wait_first = _wait_first
