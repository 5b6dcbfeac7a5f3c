"""Session keying and session scope in the worker's per-message logic (issue 17): events of a
run with a session are keyed by the session id, and the worker seeds a session's new run from
the previous run's stored state exactly as the pure core does."""

from __future__ import annotations

from core_helpers import Run, fleet, guard, text_result

from streams.core.events import AgentEvent, Decision
from streams.core.run_state import RunState
from streams.service.config_book import ConfigBook
from streams.service.processor import EventProcessor

BLOCK = {"enabled": True, "warningThreshold": 5, "criticalThreshold": 8, "scope": "session"}


class NoOverrides:
    version = 0

    def get(self, key: str) -> None:
        return None


class Tables:
    """The worker's two tables as the changelog would give them back: stored states are
    copies (through to_dict), so nothing reaches a run but what was written."""

    def __init__(self) -> None:
        self.runs: dict[bytes, dict] = {}
        self.sessions: dict[bytes, bytes] = {}

    def load(self, key: bytes) -> RunState | None:
        data = self.runs.get(key)
        return None if data is None else RunState.from_dict(data)

    def store(self, proc: EventProcessor) -> None:
        for run in proc.take_touched():
            self.runs[run.key] = run.state.to_dict()
        self.sessions.update(proc.take_sessions())


def processor(tables: Tables, block: dict) -> EventProcessor:
    configs = ConfigBook(fleet(block), NoOverrides())
    return EventProcessor(tables.load, configs.for_agent, tables.sessions.get)


def two_runs(second_trigger: str = "compaction") -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for run_id, trigger in (("run-a", "user"), ("run-b", second_trigger)):
        run = Run(run_id=run_id, session_id="sess-1", time_step=10)
        events.append(run.make_start(trigger))
        for i in range(6):
            events.append(run.make_call("read", {"path": "a.txt"}, f"{run_id}-{i}"))
            events.append(
                run.make_result(
                    "read", {"path": "a.txt"}, text_result("same"), call_id=f"{run_id}-{i}"
                )
            )
        events.append(run.make_end())
    return events


def through_worker(events: list[AgentEvent], block: dict, batch: int = 5) -> list[Decision]:
    tables = Tables()
    proc = processor(tables, block)
    decisions: list[Decision] = []
    for i, event in enumerate(events):
        outcome = proc.apply(b"sess-1", event)
        assert outcome.rekey is None and outcome.dead_letter is None
        decisions += outcome.decisions
        if i % batch == batch - 1:
            tables.store(proc)
    tables.store(proc)
    assert tables.sessions == {b"sess-1": b"run-b"}
    return decisions


def test_a_session_run_is_seeded_from_the_stored_previous_run_as_in_the_core() -> None:
    events = two_runs()
    core = guard(BLOCK)
    expected = [d for e in events for d in core.process(e)]
    for batch in (1, 3, 5, 100):
        assert through_worker(events, BLOCK, batch) == expected
    assert [d.action.value for d in expected if d.run_id == "run-b"].count("block") == 2


def test_run_scope_and_fresh_triggers_carry_nothing_in_the_worker_either() -> None:
    for decisions in (
        through_worker(two_runs(), {**BLOCK, "scope": "run"}),
        through_worker(two_runs("heartbeat"), BLOCK),
    ):  # each run warns at its own sixth call, and neither gets further
        assert [(d.run_id, d.action.value, d.count) for d in decisions] == [
            ("run-a", "warn", 5),
            ("run-b", "warn", 5),
        ]


def test_a_first_event_that_waits_across_batches_is_still_seeded() -> None:
    events = two_runs()
    second = events.index(next(e for e in events if e.envelope.run_id == "run-b"))
    late_start = [*events[:second], *events[second + 1 : second + 4], events[second]]
    late_start += events[second + 4 :]
    core = guard(BLOCK)
    expected = [d for e in late_start for d in core.process(e)]
    assert through_worker(late_start, BLOCK, batch=1) == expected
    assert any(d.run_id == "run-b" and d.action.value == "block" for d in expected)


def test_events_are_keyed_by_session_and_rekeyed_when_sent_under_the_run_id() -> None:
    tables = Tables()
    proc = processor(tables, BLOCK)
    start = Run(run_id="run-a", session_id="sess-1").make_start("user")
    outcome = proc.apply(b"run-a", start)
    assert outcome.rekey == b"sess-1" and proc.take_touched() == []
    assert proc.apply(b"sess-1", start).rekey is None
    plain = Run(run_id="run-p").make_start()
    assert proc.apply(b"sess-1", plain).rekey == b"run-p"  # no session: keyed by its run
    assert proc.apply(b"run-p", plain).rekey is None
    touched = {run.key: run.state.session_id for run in proc.take_touched()}
    assert touched == {b"run-a": "sess-1", b"run-p": ""}
