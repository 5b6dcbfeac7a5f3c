"""CrashExit: an agent that raises arms the exit deadline once; a normal stop does not."""

from __future__ import annotations

import asyncio
import threading

import pytest

from streams.worker.crash_exit import CRASH_EXIT_STATUS, CrashExit


class RecordedExit:
    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.called = threading.Event()

    def __call__(self, status: int) -> None:
        self.statuses.append(status)
        self.called.set()


async def failing(stream: object) -> None:
    raise RuntimeError("boom")


async def cancelled(stream: object) -> None:
    raise asyncio.CancelledError


def test_a_crashed_agent_exits_the_process_after_the_grace_period(caplog) -> None:
    recorded = RecordedExit()
    crash_exit = CrashExit(0.05, exit=recorded)
    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(crash_exit.guard("guard_runs", failing)(None))
    assert recorded.called.wait(10)
    assert recorded.statuses == [CRASH_EXIT_STATUS]
    assert "agent guard_runs crashed: RuntimeError('boom')" in caplog.text


def test_the_deadline_is_armed_once() -> None:
    recorded = RecordedExit()
    crash_exit = CrashExit(0.05, exit=recorded)
    crash_exit.arm("first")
    first = crash_exit.timer
    crash_exit.arm("second")
    assert crash_exit.timer is first
    assert recorded.called.wait(10)
    assert first is not None
    first.join(10)
    assert recorded.statuses == [CRASH_EXIT_STATUS]


def test_a_cancelled_agent_is_a_normal_stop_and_arms_nothing() -> None:
    recorded = RecordedExit()
    crash_exit = CrashExit(0.05, exit=recorded)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(crash_exit.guard("guard_runs", cancelled)(None))
    assert crash_exit.timer is None and recorded.statuses == []


def test_the_guarded_body_keeps_the_agent_name_faust_shows() -> None:
    guarded = CrashExit(1.0).guard("guard_runs", failing)
    assert guarded.__name__ == "failing" and guarded.__wrapped__ is failing
