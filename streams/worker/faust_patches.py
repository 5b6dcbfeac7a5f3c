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

Resume order after recovery (faust-streaming issue #596): when a worker finishes restoring
its tables, Faust resumes the stream partitions, then seeks them to the committed offsets,
then resumes flow control - and resuming flow control empties every stream queue. Events the
fetcher delivered while the seek was under way were dropped from the queues although the
consumer had already moved past them, and Faust then committed over the gap: a worker that
took over partitions while gateways kept publishing lost events for good (seen on tansu as a
replacement worker that "went quiet" after its first few events). :func:`ordered_recovery_resume`
seeks first, empties the queues, and only then lets the stream partitions fetch again.

The fetch snapshot that goes with the resume order is :mod:`streams.worker.fast_failover`'s
(one replacement of ``getmany`` for both). Each patch is declared as a
:class:`~streams.worker.patching.Patch` below its code; the inventory and the order they are
installed in: :mod:`streams.worker.faust_layer`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

from faust.tables import recovery as faust_recovery
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.services import WaitResults

from streams.kafka.true_end import true_end_offsets
from streams.settings import Settings
from streams.worker.fast_failover import mark_recovered, rebalanced_again
from streams.worker.patching import Patch, replace

_original = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer
_original_wait_first = faust_consumer.Consumer.wait_first
_original_build_highwaters = faust_recovery.Recovery._build_highwaters
_EVENT_WAIT = asyncio.Event.wait.__code__

FETCH_WAIT = Patch(
    faust_aiokafka.AIOKafkaConsumerThread,
    "_create_worker_consumer",
    _original,
    "c2701bfc3e6f6cad",
    fixes="Faust hard-codes fetch_max_wait_ms=1500: on tansu, which holds an empty fetch for "
    "the whole wait, a decision sat unseen for up to 1.5 s",
    proof="tests/unit/worker/test_faust_patches.py::"
    "test_the_worker_consumer_fetches_with_the_set_wait",
)
HANDOFF = Patch(
    faust_consumer.Consumer,
    "wait_first",
    _original_wait_first,
    "feade6a31f8a6789",
    fixes="every fetched message handed over through four tasks and an asyncio.wait: a sixth "
    "of a worker's CPU in a profile of bench/e2e_bench.py",
    proof="tests/unit/worker/test_faust_patches.py::"
    "test_a_delivery_that_never_waits_is_handed_over_without_the_slow_path",
)
RECOVERY_COMPLETED = Patch(
    faust_recovery.Recovery,
    "on_recovery_completed",
    faust_recovery.Recovery.on_recovery_completed,
    "6ef567acf072e46d",
    fixes="faust-streaming #596: streams resumed before the seek and the queue reset, so "
    "events fetched meanwhile were dropped and committed over (a replacement worker lost events)",
    proof="tests/unit/worker/test_faust_patches.py::"
    "test_stream_partitions_resume_only_after_the_seek_and_the_queue_reset",
)
RESUME_STREAMS = Patch(
    faust_recovery.Recovery,
    "_resume_streams",
    faust_recovery.Recovery._resume_streams,
    "d986a6710c1aca98",
    fixes="faust-streaming #596 again, when there was nothing to restore",
    proof="tests/unit/worker/test_faust_patches.py::test_a_new_rebalance_resumes_nothing",
)
TRUE_END = Patch(
    faust_recovery.Recovery,
    "_build_highwaters",
    _original_build_highwaters,
    "91b4cc0d3724ae7b",
    fixes="tansu reports a topic's end as its last batch's first offset + 1: a recovered "
    "table missed the newest states (at least once only)",
    proof="tests/integration/test_reliability.py::"
    "test_replacement_of_an_idle_worker_recovers_the_newest_state",
)
PATCHES = (FETCH_WAIT, HANDOFF, RECOVERY_COMPLETED, RESUME_STREAMS, TRUE_END)


def set_fetch_max_wait(ms: int) -> None:
    def create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = _original(self, transport)
        consumer._fetch_max_wait_ms = ms
        return consumer

    replace(FETCH_WAIT, create_worker_consumer)


def set_consumer_fetch_wait(consumer: Any, ms: int) -> None:
    """The fetch wait of an aiokafka consumer's next fetch requests: its fetcher reads it for
    each request it builds (:class:`streams.worker.fetch_backoff.FetchBackoff` moves it)."""
    consumer._fetch_max_wait_ms = ms
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is not None:
        fetcher._fetch_max_wait_ms = ms


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
    replace(HANDOFF, _wait_first)


async def _resume_stream_partitions(self: Any, generation_id: int) -> bool:
    """Seek, empty the queues, then resume: no event reaches a queue that is about to be
    emptied. Returns False when another rebalance started meanwhile."""
    app, consumer = self.app, self.app.consumer
    assignment = consumer.assignment()
    if rebalanced_again(self, generation_id):
        self.log.warning("Recovery rebalancing again")
        return False
    if assignment:
        self.log.info("Seek stream partitions to committed offsets.")
        await self._wait(consumer.perform_seek(), timeout=app.conf.broker_request_timeout)
        if rebalanced_again(self, generation_id):  # it began during the seek
            self.log.warning("Recovery rebalancing again")
            return False
    self.completed.set()
    app.flow_control.resume()  # empties the stream queues; the partitions are still paused
    consumer.resume_partitions({tp for tp in assignment if not self._is_changelog_tp(tp)})
    consumer.resume_flow()
    await app._fetcher.maybe_start()
    return True


async def _on_recovery_completed(self: Any, generation_id: int = 0) -> None:
    """Faust's Recovery.on_recovery_completed, resuming the streams in a safe order."""
    self.log.info("Restore complete!")
    await self.app.on_rebalance_complete.send()
    self._set_recovery_ended()
    callbacks = [
        asyncio.ensure_future(
            table.on_recovery_completed(
                self.actives_for_table[table], self.standbys_for_table[table]
            )
        )
        for table in self.tables.values()
    ]
    if callbacks:
        await asyncio.wait(callbacks)
    if not rebalanced_again(self, generation_id):
        mark_recovered(self)  # its partitions, kept at the next rebalance, start at their ends
    if not await _resume_stream_partitions(self, generation_id):
        return
    self.tables.on_actives_ready()
    if not self.app.assignor.assigned_standbys():
        self.tables.on_standbys_ready()
    self.app.on_rebalance_end()
    self.log.info("Worker ready")


async def _resume_streams(self: Any, generation_id: int = 0) -> None:
    """Faust's Recovery._resume_streams (nothing to restore), resuming in a safe order."""
    await self.app.on_rebalance_complete.send()
    if not await _resume_stream_partitions(self, generation_id):
        return
    self.tables.on_actives_ready()
    self.tables.on_standbys_ready()
    self.app.on_rebalance_end()
    self.log.info("Worker ready")


def ordered_recovery_resume() -> None:
    replace(RECOVERY_COMPLETED, _on_recovery_completed)
    replace(RESUME_STREAMS, _resume_streams)


def read_changelogs_to_their_end(settings: Settings) -> None:
    """Table recovery reads each changelog partition to its last record, not to the end offset
    the broker reports (tansu's stops at its last batch's first record, so with several
    records per producer batch a recovered table missed the newest states): the targets are
    raised to :func:`streams.kafka.true_end.true_end_offsets`."""

    async def build_highwaters(
        self: Any, consumer: Any, tps: Any, destination: Any, title: str
    ) -> None:
        await _original_build_highwaters(self, consumer, tps, destination, title)
        # Faust keeps end offset - 1 (the last record's offset), -1 for an empty partition.
        reported = {(tp.topic, tp.partition): destination[tp] + 1 for tp in tps}
        ends = await asyncio.to_thread(true_end_offsets, settings, reported)
        for tp in tps:
            last = ends[(tp.topic, tp.partition)] - 1
            if last > destination[tp]:
                self.log.info(
                    "changelog %s holds records up to offset %d, past its reported end %d",
                    tp, last, destination[tp] + 1,
                )  # fmt: skip
                destination[tp] = last

    replace(TRUE_END, build_highwaters)
