"""The session's failing calls in the worker (issue 44): stored with the session's latest run in
the runs table, through the changelog's bytes, and handed to the next run, a fresh-triggered
heartbeat included, exactly as the pure core hands them."""

from __future__ import annotations

from core_helpers import Run, fleet, guard, summary

from streams.core.events import AgentEvent, Decision
from streams.core.run_state import RunState
from streams.service.config_book import ConfigBook
from streams.service.processor import EventProcessor
from streams.state import state_format

BLOCK = {"enabled": True, "scope": "session"}
SESSION = b"agent:main:main"


class NoOverrides:
    version = 0

    def get(self, key: str) -> None:
        return None


class ChangelogTables:
    """The worker's runs and sessions tables, each state stored as the changelog's bytes."""

    def __init__(self) -> None:
        self.runs: dict[bytes, bytes] = {}
        self.sessions: dict[bytes, bytes] = {}

    def load(self, key: bytes) -> RunState | None:
        payload = self.runs.get(key)
        return None if payload is None else state_format.decode(payload)

    def store(self, proc: EventProcessor) -> None:
        for run in proc.take_touched():
            self.runs[run.key] = state_format.encode(run.state)
        self.sessions.update(proc.take_sessions())


def failing_heartbeat(runs: int) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for i in range(runs):
        run = Run(
            run_id=f"hb-{i:02d}",
            session_id=SESSION.decode(),
            start_time=1_767_225_600_000 + i * 1_800_000,
            time_step=2_000,
        )
        events.append(run.make_start("heartbeat"))
        events.append(run.make_call("read", {"path": "HEARTBEAT.md"}, f"c{i}"))
        events.append(
            run.make_result(
                "read", {"path": "HEARTBEAT.md"}, error="Tool not found: read", call_id=f"c{i}"
            )
        )
        events.append(run.make_end())
    return events


def test_the_worker_carries_the_failing_calls_into_fresh_heartbeats_as_the_core() -> None:
    events = failing_heartbeat(8)
    core = guard(BLOCK)
    expected = [d for event in events for d in core.process(event)]
    # events written beforehand: each blocked read still ran and failed (no veto came back)
    assert summary(expected) == [
        ("warn", "error_across_runs", 3),
        ("warn", "error_across_runs", 4),
        *(("block", "error_across_runs", n) for n in (5, 6, 7)),
    ]
    for batch in (1, 3, 100):
        tables = ChangelogTables()
        configs = ConfigBook(fleet(BLOCK), NoOverrides())
        proc = EventProcessor(tables.load, configs.for_agent, tables.sessions.get)
        decisions: list[Decision] = []
        for i, event in enumerate(events):
            outcome = proc.apply(SESSION, event)
            assert outcome.rekey is None and outcome.dead_letter is None
            decisions += outcome.decisions
            if i % batch == batch - 1:
                tables.store(proc)
        tables.store(proc)
        assert decisions == expected, batch
        latest = state_format.decode(tables.runs[tables.sessions[SESSION]])
        assert [entry.runs for entry in latest.failing.entries.values()] == [8]
