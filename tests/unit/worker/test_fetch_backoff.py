"""An idle worker's fetch wait backs off (issue 42): the profile's wait while records come and
for a grace after the last, then doubled every second without one up to the idle cap, back at
once with the next records; set on the aiokafka consumer's fetcher through the fetch patch."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from streams.settings import Settings
from streams.worker import fast_failover
from streams.worker.fetch_backoff import GRACE_SECONDS, FetchBackoff


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_wait_doubles_each_idle_second_past_the_grace_up_to_the_cap() -> None:
    clock = Clock()
    backoff = FetchBackoff(5, 500, clock)
    assert backoff.next_wait(True) == 5
    clock.now += GRACE_SECONDS - 0.5
    assert backoff.next_wait(False) == 5  # a short pause keeps the profile's wait
    waits = []
    for _ in range(9):
        clock.now += 1.0
        waits.append(backoff.next_wait(False))
    assert waits == [10, 20, 40, 80, 160, 320, 500, 500, 500]
    assert backoff.next_wait(True) == 5  # the first records bring it back at once
    clock.now += 3600 * 24 * 365  # a year idle: still the cap, no overflow
    assert backoff.next_wait(False) == 500


def test_no_back_off_where_the_cap_is_not_above_the_profiles_wait() -> None:
    clock = Clock()
    backoff = FetchBackoff(500, 500, clock)  # the kafka profile
    clock.now += 60
    assert backoff.next_wait(False) == 500
    assert FetchBackoff(5, 1, clock).idle_max_ms == 5


def test_the_profiles_idle_caps() -> None:
    tansu, kafka = Settings.for_profile("tansu"), Settings.for_profile("kafka")
    assert (tansu.fetch_max_wait_ms, tansu.idle_fetch_max_wait_ms) == (5, 500)
    assert kafka.idle_fetch_max_wait_ms == kafka.fetch_max_wait_ms  # Kafka answers at once


def test_each_fetch_moves_the_consumers_fetcher_wait(monkeypatch) -> None:
    """Through the fetch patch (fast_failover's getmany): the aiokafka consumer's fetcher,
    which reads the wait for every request it builds, gets the backed-off wait."""
    clock = Clock()
    fetcher = SimpleNamespace(_fetch_max_wait_ms=5)
    consumer = SimpleNamespace(_fetch_max_wait_ms=5, _fetcher=fetcher)
    thread = SimpleNamespace(
        app=SimpleNamespace(in_recovery=False, loopguard_fetch_backoff=FetchBackoff(5, 500, clock)),
        _ensure_consumer=lambda: consumer,
    )
    answers: list[dict] = []

    async def original(self: Any, active: Any, timeout: float) -> dict:
        return answers.pop(0)

    monkeypatch.setattr(fast_failover, "_original_thread_getmany", original)

    def fetch(records: dict) -> int:
        answers.append(records)
        asyncio.run(fast_failover._getmany(thread, {("lg.events", 0)}, 1.0))
        return fetcher._fetch_max_wait_ms

    clock.now += GRACE_SECONDS + 3.5
    assert fetch({}) == 80 and consumer._fetch_max_wait_ms == 80
    assert fetch({("lg.events", 0): [object()]}) == 5
