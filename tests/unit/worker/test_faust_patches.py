"""The Faust patches of streams/worker/faust_patches.py, on stand-ins for Faust's objects.

The end-to-end proof is tests/integration/test_reliability.py (a replacement worker restoring
its table while gateways publish); these pin the two rules that make it hold.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from streams.worker import faust_patches

EVENTS = [("lg.events", p) for p in range(2)]
CHANGELOG = [("lg-runs-changelog", p) for p in range(2)]


def test_fetch_gets_a_snapshot_of_the_active_partitions(monkeypatch) -> None:
    seen: list[Any] = []

    async def original(self: Any, active: Any, timeout: float) -> dict:
        seen.append(active)
        return {"fetched": True}

    monkeypatch.setattr(faust_patches, "_original_thread_getmany", original)
    live = set(EVENTS)
    assert asyncio.run(faust_patches._getmany_snapshot(None, live, 1.0)) == {"fetched": True}
    live.clear()  # Faust pausing partitions later must not change what was asked for
    assert seen == [frozenset(EVENTS)]


def test_an_empty_partition_set_fetches_nothing(monkeypatch) -> None:
    """aiokafka reads an empty set as "all partitions", paused ones included."""

    async def original(self: Any, active: Any, timeout: float) -> dict:
        raise AssertionError("must not fetch")

    monkeypatch.setattr(faust_patches, "_original_thread_getmany", original)
    assert asyncio.run(faust_patches._getmany_snapshot(None, set(), 1.0)) == {}


def test_client_only_fetch_still_means_every_partition(monkeypatch) -> None:
    seen: list[Any] = []

    async def original(self: Any, active: Any, timeout: float) -> dict:
        seen.append(active)
        return {}

    monkeypatch.setattr(faust_patches, "_original_thread_getmany", original)
    asyncio.run(faust_patches._getmany_snapshot(None, None, 1.0))
    assert seen == [None]


def recovery(calls: list[str], *, generation: int = 3) -> Any:
    async def perform_seek() -> None:
        calls.append("seek")

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
        conf=SimpleNamespace(broker_request_timeout=1.0),
        flow_control=SimpleNamespace(resume=lambda: calls.append("empty queues")),
        _fetcher=SimpleNamespace(maybe_start=maybe_start),
    )
    return SimpleNamespace(
        app=app,
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


# -- fence -------------------------------------------------------------------------------


def test_the_installed_faust_is_the_one_the_patches_were_written_for() -> None:
    assert faust_patches.patch_mismatches() == []


def test_a_changed_upstream_method_is_refused(monkeypatch) -> None:
    def edited_upstream(self, *coros, timeout=None):  # stands in for a newer Faust's body
        return None

    name = "Consumer.wait_first"
    monkeypatch.setitem(
        faust_patches.REPLACED, name, (edited_upstream, faust_patches.REPLACED[name][1])
    )
    monkeypatch.setattr(faust_patches, "PATCHED_VERSION", "0.0.1")
    problems = faust_patches.patch_mismatches()
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
