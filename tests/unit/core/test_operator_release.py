"""An operator's release or abort applied by the core (issue 43): the block lifts, the loop's
counters restart, the run draws warnings only for N calls (or until a time), then the guard
resumes; the window survives the state's round trip; a redelivered command applies once."""

from __future__ import annotations

from typing import Any

from streams.core.events import ABORT_DETECTOR, RELEASE_DETECTOR, Action, Decision, Envelope
from streams.core.operator_command import (
    ABORT,
    RELEASE,
    OperatorCommand,
    command_from_dict,
    command_to_dict,
)
from streams.core.run_state import RunState
from tests.core_helpers import SMALL_LIMITS, Run, guard

READ = {"path": "/etc/motd"}


def command(
    run: Run, name: str = RELEASE, release_id: str = "rel-1", **fields: Any
) -> OperatorCommand:
    env = Envelope(run.run_id, run.agent_id, "", 0, run.start_time + run.time_step * run.seq)
    fields.setdefault("reason", "fine")
    return OperatorCommand(env, name, release_id, released_by="ops", **fields)


def loop_until_blocked(run: Run) -> Decision:
    for _ in range(20):
        out = run.call("read", READ)
        run.result("read", READ, {"text": "same"})
        blocks = [d for d in out if d.action is Action.BLOCK]
        if blocks:
            return blocks[0]
    raise AssertionError("the loop was never blocked")


def actions(decisions: list[Decision]) -> list[str]:
    return [d.action.value for d in decisions if d.detector != RELEASE_DETECTOR]


def test_release_lifts_the_block_warns_for_n_calls_then_the_guard_resumes() -> None:
    lg = guard(SMALL_LIMITS)
    run = Run(lg)
    block = loop_until_blocked(run)
    released = lg.process(command(run, calls=4))
    assert [d.detector for d in released] == [RELEASE_DETECTOR]
    assert released[0].action is Action.WARN and released[0].seq == run.seq
    assert released[0].extra["released_detector"] == block.detector
    assert released[0].extra["released_seq"] == block.seq
    assert "released by ops: fine" in released[0].reason
    # The next call goes through: the counters restarted, so the same call is new again.
    assert run.call("read", READ) == []
    run.result("read", READ, {"text": "same"})
    seen: list[Decision] = []
    for _ in range(3):  # the window's other 3 calls: warnings where the rules would stop
        seen += run.call("read", READ)
        run.result("read", READ, {"text": "same"})
    assert seen and {d.action for d in seen} == {Action.WARN}
    assert any(d.extra.get("would_be") == "block" for d in seen)
    # The window is spent: the guard blocks again.
    assert actions(run.call("read", READ)) == ["block"]


def test_release_until_a_time_ends_by_event_time() -> None:
    lg = guard(SMALL_LIMITS)
    run = Run(lg)
    loop_until_blocked(run)
    until = run.start_time + run.time_step * (run.seq + 8)  # 4 more calls and results
    lg.process(command(run, until=until))
    during: list[Decision] = []
    for _ in range(4):
        during += run.call("read", READ)
        run.result("read", READ, {"text": "same"})
    assert {d.action for d in during} <= {Action.WARN}
    assert any(d.extra.get("would_be") for d in during)
    assert actions(run.call("read", READ)) == ["block"]


def test_a_released_window_survives_the_state_round_trip_and_a_command_applies_once() -> None:
    lg = guard(SMALL_LIMITS)
    run = Run(lg)
    loop_until_blocked(run)
    release = command(run, calls=3)
    assert lg.process(release)
    assert lg.process(release) == []  # redelivered: applied once
    state = lg.runs[run.run_id]
    restored = RunState.from_dict(state.to_dict())
    assert restored.release == state.release and restored.commands == ["rel-1"]
    assert restored.to_dict() == state.to_dict()


def test_abort_stops_the_run_and_a_stopped_run_takes_no_command() -> None:
    lg = guard(SMALL_LIMITS)
    run = Run(lg)
    run.call("read", READ)
    aborted = lg.process(command(run, ABORT, reason="runaway"))
    assert [(d.action, d.detector) for d in aborted] == [(Action.ABORT, ABORT_DETECTOR)]
    assert aborted[0].reason == "aborted by ops: runaway"
    assert [d.action for d in run.call("read", READ)] == [Action.ABORT]
    assert lg.process(command(run, release_id="rel-2")) == []  # over: nothing to release


def test_a_command_for_a_run_this_guard_does_not_hold_decides_nothing() -> None:
    lg = guard(SMALL_LIMITS)
    assert lg.process(command(Run(run_id="gone"))) == []


def test_export_form_round_trips() -> None:
    original = command(Run(), calls=5, until=123, scope="agent", source="web")
    data = command_to_dict(original)
    assert data["kind"] == "operator_command"
    assert command_from_dict(data) == original
