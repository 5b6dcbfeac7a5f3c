"""LogThrottle: one line per interval, and the count of those held back in between."""

from __future__ import annotations

from streams.gateway.throttle import LogThrottle


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_admitted_per_interval_and_the_rest_counted() -> None:
    clock = FakeClock()
    throttle = LogThrottle(10.0, clock=clock)
    assert throttle.admit()
    assert [throttle.admit() for _ in range(5)] == [False] * 5
    clock.now += 9.9
    assert not throttle.admit()
    clock.now += 0.1
    assert throttle.admit()
    assert throttle.take_held_back() == 6
    assert throttle.take_held_back() == 0


def test_quiet_periods_admit_the_next_one_at_once() -> None:
    clock = FakeClock()
    throttle = LogThrottle(10.0, clock=clock)
    assert throttle.admit()
    clock.now += 3600
    assert throttle.admit() and throttle.take_held_back() == 0
