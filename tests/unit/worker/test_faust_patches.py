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
