"""The Faust patches of streams/worker/faust_patches.py (and fast_failover's fetch snapshot), on
stand-ins for Faust's objects.

The end-to-end proof is tests/integration/test_reliability.py (a replacement worker restoring
its table while gateways publish); these pin the two rules that make it hold.
"""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.types import Message

from streams.worker import fast_failover, faust_layer, faust_patches
from streams.worker.ready_batches import take_ready

EVENTS = [("lg.events", p) for p in range(2)]
CHANGELOG = [("lg-runs-changelog", p) for p in range(2)]


def test_fetch_gets_a_snapshot_of_the_active_partitions(monkeypatch) -> None:
    seen: list[Any] = []

    async def original(self: Any, active: Any, timeout: float) -> dict:
        seen.append(active)
        return {"fetched": True}

    monkeypatch.setattr(fast_failover, "_original_thread_getmany", original)
    live = set(EVENTS)
    assert asyncio.run(fast_failover._fetch_snapshot(None, live, 1.0)) == {"fetched": True}
    live.clear()  # Faust pausing partitions later must not change what was asked for
    assert seen == [frozenset(EVENTS)]


def test_an_empty_partition_set_fetches_nothing(monkeypatch) -> None:
    """aiokafka reads an empty set as "all partitions", paused ones included."""

    async def original(self: Any, active: Any, timeout: float) -> dict:
        raise AssertionError("must not fetch")

    monkeypatch.setattr(fast_failover, "_original_thread_getmany", original)
    assert asyncio.run(fast_failover._fetch_snapshot(None, set(), 1.0)) == {}


def test_client_only_fetch_still_means_every_partition(monkeypatch) -> None:
    seen: list[Any] = []

    async def original(self: Any, active: Any, timeout: float) -> dict:
        seen.append(active)
        return {}

    monkeypatch.setattr(fast_failover, "_original_thread_getmany", original)
    asyncio.run(fast_failover._fetch_snapshot(None, None, 1.0))
    assert seen == [None]


def recovery(calls: list[str], *, generation: int = 3, rebalance_during_seek: bool = False) -> Any:
    async def perform_seek() -> None:
        calls.append("seek")
        if rebalance_during_seek:  # Faust counts a rebalance as its revocation begins
            app.rebalancing_count += 1

    async def maybe_start() -> None:
        calls.append("fetcher")

    async def wait(coro: Any, timeout: float) -> None:
        await coro

    consumer = SimpleNamespace(
        assignment=lambda: set(EVENTS + CHANGELOG),
        perform_seek=perform_seek,
        resume_partitions=lambda tps: calls.append(f"resume {sorted(tps)}"),
        resume_flow=lambda: calls.append("flow"),
    )
    app = SimpleNamespace(
        consumer=consumer,
        consumer_generation_id=generation,
        rebalancing_count=5,
        conf=SimpleNamespace(broker_request_timeout=1.0),
        flow_control=SimpleNamespace(resume=lambda: calls.append("empty queues")),
        _fetcher=SimpleNamespace(maybe_start=maybe_start),
    )
    return SimpleNamespace(
        app=app,
        loopguard_rebalances=5,  # counted when this recovery's partitions were assigned
        _wait=wait,
        completed=SimpleNamespace(set=lambda: calls.append("completed")),
        log=SimpleNamespace(info=lambda *a: None, warning=lambda *a: calls.append("again")),
        _is_changelog_tp=lambda tp: tp in CHANGELOG,
    )


def test_stream_partitions_resume_only_after_the_seek_and_the_queue_reset() -> None:
    calls: list[str] = []
    assert asyncio.run(faust_patches._resume_stream_partitions(recovery(calls), 3))
    assert calls == [
        "seek",
        "completed",
        "empty queues",
        f"resume {sorted(EVENTS)}",
        "flow",
        "fetcher",
    ]


@pytest.mark.parametrize("generation", [2, 4])
def test_a_new_rebalance_resumes_nothing(generation: int) -> None:
    calls: list[str] = []
    assert not asyncio.run(
        faust_patches._resume_stream_partitions(recovery(calls, generation=generation), 3)
    )
    assert calls == ["again"]


def test_a_rebalance_that_begins_during_the_seek_resumes_nothing() -> None:
    """The seek awaits the broker: a rebalance that began meanwhile owns the streams now.
    Resumed anyway, they fetched the next assignment's partitions before its recovery, and
    the batches decided there were read back into the tables (CI's join-then-leave failures)."""
    calls: list[str] = []
    stale = recovery(calls, rebalance_during_seek=True)
    assert not asyncio.run(faust_patches._resume_stream_partitions(stale, 3))
    assert calls == ["seek", "again"]


# -- fence -------------------------------------------------------------------------------


def test_the_installed_faust_is_the_one_the_patches_were_written_for() -> None:
    assert faust_layer.mismatches() == []


def test_a_changed_upstream_method_is_refused(monkeypatch) -> None:
    def edited_upstream(self, *coros, timeout=None):  # stands in for a newer Faust's body
        return None

    name = "Consumer.wait_first"
    edited = [
        dataclasses.replace(patch, upstream=edited_upstream) if patch.name == name else patch
        for patch in faust_layer.INVENTORY
    ]
    monkeypatch.setattr(faust_layer, "INVENTORY", tuple(edited))
    monkeypatch.setattr(faust_layer, "PATCHED_VERSION", "0.0.1")
    problems = faust_layer.mismatches()
    assert problems[0].startswith("faust-streaming 0.15.3 is installed, not 0.0.1")
    assert problems[1:] == [f"{name} differs from the source the patch was written against"]


# -- fast hand-off -----------------------------------------------------------------------


class HandoffConsumer:
    """The state _wait_first (and mode's own wait_first behind it) reads."""

    def __init__(self) -> None:
        self.suspend_flow = asyncio.Event()
        self._stopped = asyncio.Event()
        self._crashed = asyncio.Event()
        self.loop = asyncio.get_running_loop()


def test_a_delivery_that_never_waits_is_handed_over_without_the_slow_path(monkeypatch) -> None:
    slow: list[object] = []

    async def original(self, *coros, timeout=None):
        slow.append(coros)
        return await coros[0]

    monkeypatch.setattr(faust_patches, "_original_wait_first", original)

    async def scenario():
        consumer = HandoffConsumer()
        delivered = []

        async def deliver():
            delivered.append("message")
            return "done"

        result = await faust_patches._wait_first(consumer, deliver(), asyncio.Event().wait())
        return result, delivered

    result, delivered = asyncio.run(scenario())
    assert delivered == ["message"] and slow == []
    assert result.results == ["done"] and not result.stopped


def test_a_delivery_that_must_wait_resumes_where_it_paused(monkeypatch) -> None:
    async def scenario():
        consumer = HandoffConsumer()
        room = asyncio.Event()
        steps = []

        async def deliver():
            steps.append("started")
            await room.wait()  # the stream's buffer is full: delivery must wait
            steps.append("finished")
            return "done"

        async def make_room():
            await asyncio.sleep(0)
            room.set()

        asyncio.get_running_loop().create_task(make_room())
        flow = asyncio.Event()
        await faust_patches._wait_first(consumer, deliver(), flow.wait())
        return steps

    assert asyncio.run(scenario()) == ["started", "finished"]


def test_while_flow_is_suspended_the_original_path_runs(monkeypatch) -> None:
    taken: list[str] = []

    async def original(self, *coros, timeout=None):
        taken.append("original")
        for coro in coros:
            coro.close()

    monkeypatch.setattr(faust_patches, "_original_wait_first", original)

    async def scenario():
        consumer = HandoffConsumer()
        consumer.suspend_flow.set()

        async def deliver():
            taken.append("fast")

        await faust_patches._wait_first(consumer, deliver(), asyncio.Event().wait())

    asyncio.run(scenario())
    assert taken == ["original"]


# -- batches handed over as soon as nothing more is queued (streams/worker/ready_batches.py) --

HOUR = 3600.0  # a batch window no test waits out: a batch that waited for it would hang here


def faust_stream() -> tuple[Any, Any]:
    """A real Faust stream over an in-memory channel (no broker is contacted), and a maker of
    events as the consumer would deliver them to it."""
    app = faust.App("lg-unit", broker="kafka://127.0.0.1:9", store="memory://")
    app.flow_control.resume()  # as after a rebalance: the stream takes what it is given
    stream = app.stream(app.channel())

    def deliver(offset: int) -> None:
        message = Message("lg.events", 0, offset, 0.0, None, None, b"run", b"e", None)
        message.generation_id = app.consumer_generation_id
        stream.channel.queue.put_nowait(app.create_event(b"run", b"e", None, message))

    return stream, deliver


def offsets(batch: list[Any]) -> list[int]:
    return [event.message.offset for event in batch]


def test_a_batch_takes_what_is_queued_and_never_waits_out_its_window() -> None:
    async def scenario() -> list[list[int]]:
        stream, deliver = faust_stream()
        for offset in range(5):
            deliver(offset)
        batches = take_ready(stream, 3, HOUR)
        first = offsets(await anext(batches))  # at most max_
        second = offsets(await anext(batches))  # the rest, at once: nothing more is queued
        waiting = asyncio.ensure_future(anext(batches))
        deliver(5)  # arrives alone, later: a batch of its own, not held for company
        third = offsets(await waiting)
        await batches.aclose()
        return [first, second, third]

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == [[0, 1, 2], [3, 4], [5]]


def test_events_arriving_while_a_batch_is_guarded_make_the_next_batch_unacked() -> None:
    async def scenario() -> tuple[list[list[int]], list[bool]]:
        stream, deliver = faust_stream()
        deliver(0)
        batches = take_ready(stream, 10, HOUR)
        first = await anext(batches)
        for offset in (1, 2, 3):  # the consumer goes on delivering during the batch
            deliver(offset)
        second = await anext(batches)
        await batches.aclose()
        # The stream acks nothing itself: the agent acks a batch before committing it.
        return [offsets(first), offsets(second)], [e.message.acked for e in first + second]

    taken, acked = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert taken == [[0], [1, 2, 3]]
    assert not any(acked)


def test_an_error_thrown_into_the_channel_raises_in_the_batch_loop() -> None:
    async def scenario() -> None:
        stream, deliver = faust_stream()
        await stream.channel.throw(RuntimeError("channel failed"))
        deliver(0)
        await anext(take_ready(stream, 10, HOUR))

    with pytest.raises(RuntimeError, match="channel failed"):
        asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_stopped_channel_ends_the_batches() -> None:
    async def scenario() -> list[list[int]]:
        stream, deliver = faust_stream()
        deliver(0)
        deliver(1)
        await stream.channel.throw(StopAsyncIteration())  # how Faust stops an agent's channel
        return [offsets(batch) async for batch in take_ready(stream, 10, HOUR)]

    # The queue raises what was thrown into it before what it holds: the queued events are
    # never handed on (unacked, a later owner reads them again), and the agent ends cleanly.
    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == []


def test_events_of_an_older_generation_or_under_suspended_flow_are_dropped() -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        stream, deliver = faust_stream()
        app = stream.app
        deliver(0)
        app.consumer_generation_id += 1  # a rebalance since: offset 0 is not this worker's
        deliver(1)
        batches = take_ready(stream, 10, HOUR)
        after_rebalance = offsets(await anext(batches))
        deliver(2)
        app.flow_control.suspend()  # the next rebalance has begun
        deliver(3)
        app.flow_control.resume()  # Faust clears the queues it suspended
        deliver(4)
        resumed = offsets(await anext(batches))
        await batches.aclose()
        return after_rebalance, resumed

    after_rebalance, resumed = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert after_rebalance == [1]
    assert resumed == [4]  # what was queued before the rebalance is never handed on


# -- fetch wait --------------------------------------------------------------------------


def test_the_worker_consumer_fetches_with_the_set_wait(monkeypatch) -> None:
    """Faust builds the worker's aiokafka consumer with fetch_max_wait_ms=1500 whatever the
    broker: the patched builder sets LOOPGUARD_FETCH_MAX_WAIT_MS on it."""
    from faust.transport.drivers import aiokafka as faust_aiokafka

    def faust_create(self: Any, transport: Any) -> Any:
        return SimpleNamespace(_fetch_max_wait_ms=1500)

    thread = faust_aiokafka.AIOKafkaConsumerThread
    monkeypatch.setattr(thread, "_create_worker_consumer", thread._create_worker_consumer)
    monkeypatch.setattr(faust_patches, "_original", faust_create)
    faust_patches.set_fetch_max_wait(5)
    consumer = thread._create_worker_consumer(None, None)  # type: ignore[arg-type]
    assert consumer._fetch_max_wait_ms == 5
