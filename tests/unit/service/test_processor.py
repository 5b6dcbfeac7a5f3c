"""The worker's per-message logic, without Faust: the same decisions as the pure core."""

from __future__ import annotations

import pytest
from core_helpers import Run, fleet, guard, text_result

from streams.core.config import LoopDetectionConfig
from streams.core.events import AgentEvent
from streams.core.run_state import RunState
from streams.service.config_book import ConfigBook
from streams.service.processor import EventProcessor, RunGuard
from streams.state.state_encoder import StateEncoder


class NoOverrides:
    version = 0

    def get(self, key: str) -> None:
        return None


def processor(table: dict[bytes, RunState]) -> EventProcessor:
    return EventProcessor(table.get, ConfigBook(fleet({"enabled": True}), NoOverrides()).for_agent)


def looping_events(run_id: str = "run-1", cycles: int = 30) -> list:
    run = Run(run_id=run_id)
    events = [run.make_start()]
    for _ in range(cycles):
        events.append(run.make_call("read", {"path": "a.txt"}))
        events.append(run.make_result("read", {"path": "a.txt"}, text_result("same")))
    return events


def test_decisions_match_the_pure_core_and_states_are_handed_back_per_batch() -> None:
    events = looping_events()
    table: dict[bytes, RunState] = {}
    proc = processor(table)
    decisions = []
    for i, event in enumerate(events):
        decisions += proc.apply(b"run-1", event).decisions
        if i % 7 == 6:  # a batch boundary: the agent writes the touched states back
            table.update({run.key: run.state for run in proc.take_touched()})
    touched = proc.take_touched()
    table.update({run.key: run.state for run in touched})
    core = guard({"enabled": True})
    expected = [d for e in events for d in core.process(e)]
    assert decisions == expected
    assert {d.action.value for d in decisions} >= {"warn", "block"}
    assert proc.take_touched() == []
    (mark,) = [run.watermark for run in touched]
    assert (mark.run_id, mark.seq, mark.event_count) == ("run-1", len(events), len(events))
    assert (mark.agent_id, mark.gateway_id, mark.status) == ("agent-1", "gw-1", "aborted")
    assert mark.event_time == events[-1].envelope.event_time


def test_a_batch_reads_each_run_from_the_table_once() -> None:
    events = looping_events(cycles=3)
    table: dict[bytes, RunState] = {}
    proc = processor(table)
    for event in events[:3]:
        proc.apply(b"run-1", event)
    table.update({run.key: run.state for run in proc.take_touched()})
    reads: list[bytes] = []

    def counted(key: bytes) -> RunState | None:
        reads.append(key)
        return table.get(key)

    proc.runs.load = counted
    for event in events[3:]:  # the next batch: the stored run, then the batch's own state
        proc.apply(b"run-1", event)
    assert reads == [b"run-1"]
    (run,) = proc.take_touched()
    assert run.state is table[b"run-1"]  # the stored state, taken on from where it was
    assert run.state.last_seq == len(events)


def test_a_redelivered_event_publishes_the_same_decisions_again() -> None:
    events = looping_events()
    proc = processor({})
    first = [proc.apply(b"run-1", e).decisions for e in events]
    with_decisions = max(i for i, d in enumerate(first) if d)  # recent ones are kept
    assert proc.apply(b"run-1", events[with_decisions]).decisions == first[with_decisions]


def test_exactly_once_a_redelivered_event_publishes_nothing_and_leaves_the_run_alone() -> None:
    events = looping_events()
    table: dict[bytes, RunState] = {}
    proc = EventProcessor(
        table.get,
        ConfigBook(fleet({"enabled": True}), NoOverrides()).for_agent,
        republish_duplicates=False,
    )
    first = [proc.apply(b"run-1", e).decisions for e in events]
    table.update({run.key: run.state for run in proc.take_touched()})
    with_decisions = max(i for i, d in enumerate(first) if d)
    assert first[with_decisions]  # it did decide something the first time
    before = table[b"run-1"].to_dict()
    outcome = proc.apply(b"run-1", events[with_decisions])
    assert outcome.decisions == [] and outcome.dead_letter is None
    assert proc.take_touched()[0].state.to_dict()["last_seq"] == before["last_seq"]


def test_a_message_under_another_key_is_rekeyed_and_a_bad_seq_dead_lettered() -> None:
    proc = processor({})
    event = looping_events("run-9")[1]
    outcome = proc.apply(b"other", event)
    assert outcome.rekey == b"run-9" and not outcome.decisions
    assert proc.take_touched() == []
    bad = Run(run_id="run-9", start_seq=0).make_call("read", {})
    assert "seq must be 1 or more" in (proc.apply(b"run-9", bad).dead_letter or "")


@pytest.mark.parametrize("written", [True, False], ids=["encoded-states", "plain-states"])
def test_an_event_whose_evaluation_fails_is_dead_lettered_and_the_run_kept_as_it_was(
    written: bool,
) -> None:
    """Should a rule ever raise, the event is parked and its run is as before that event:
    rolled back to the bytes the worker's encoder last wrote the run as, or (a state no
    encoder wrote) to its encoding at the batch's first touch."""
    events = looping_events(cycles=12)
    bad_at = 15
    table: dict[bytes, RunState] = {}
    proc = processor(table)
    # The core fails through the processor's seam (RunGuard): a patch of LoopGuard.apply would
    # not reach a compiled processor, which calls the compiled core natively.
    proc.guard = FailingGuard(proc.guard, fails_on=events[bad_at])
    encoder = StateEncoder()

    def store(state: RunState) -> RunState:
        if written:  # as the worker's checkpoint writes the batch's states
            encoder.encode(state)
        return state

    decisions = []
    for i, event in enumerate(events):
        outcome = proc.apply(b"run-1", event)
        if i == bad_at:
            assert outcome.dead_letter == "evaluation failed: TypeError: boom"
        decisions += outcome.decisions
        if i % 10 == 9:
            table.update({run.key: store(run.state) for run in proc.take_touched()})
    (state,) = [run.state for run in proc.take_touched()]
    assert state.history_size != -1
    # The same as a core that never saw the failed event (later seqs wait for it: a gap).
    core = guard({"enabled": True})
    expected = [d for e in events if e is not events[bad_at] for d in core.process(e)]
    assert decisions == expected


class FailingGuard:
    """The processor's core, raising on one event after a half-done change to its run."""

    def __init__(self, guard: RunGuard, fails_on: object) -> None:
        self.guard, self.fails_on = guard, fails_on
        self.config_for, self.state_for, self.command = (
            guard.config_for,
            guard.state_for,
            guard.command,
        )

    def apply(self, state: RunState, event: AgentEvent, cfg: LoopDetectionConfig) -> list:
        if event is self.fails_on:
            state.history_size = -1  # a half-done change the rollback must undo
            raise TypeError("boom")
        return self.guard.apply(state, event, cfg)
