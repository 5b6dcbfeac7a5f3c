"""The gateway's control state: a call waits for its own run's watermark, is woken by it, and
is not woken by other runs' records (a gateway with a thousand agents waiting would otherwise
wake them all for every record)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from streams.core.events import Action, Decision
from streams.gateway.verdicts import ControlState
from streams.wire.avro import RunWatermark, encode_decision, encode_watermark, encode_watermarks


def watermark(run_id: str, seq: int) -> SimpleNamespace:
    mark = RunWatermark(run_id=run_id, agent_id="agent", gateway_id="gw", seq=seq, event_time=0)
    return SimpleNamespace(value=encode_watermark(mark))


def watermarks(*marks: tuple[str, int]) -> SimpleNamespace:
    """A batch's RunWatermarks record: (run id, seq) per run."""
    return SimpleNamespace(
        value=encode_watermarks(
            [
                RunWatermark(run_id=r, agent_id="agent", gateway_id="gw", seq=s, event_time=0)
                for r, s in marks
            ]
        )
    )


def block(run_id: str, seq: int, **fields: object) -> SimpleNamespace:
    decision = Decision(
        run_id=run_id,
        agent_id="agent",
        gateway_id="gw",
        seq=seq,
        event_time=0,
        action=Action.BLOCK,
        detector="exact_repeat",
        severity="critical",
        count=3,
        tool_name="exec",
        reason="same call again",
        **fields,  # type: ignore[arg-type]
    )
    return SimpleNamespace(value=encode_decision(decision))


def in_thread(work):
    out: dict[str, object] = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", work()), daemon=True)
    thread.start()
    return thread, out


def test_a_call_is_answered_when_its_runs_watermark_arrives() -> None:
    state = ControlState("gw", wait_budget_ms=5_000)
    state.track("r1")
    thread, out = in_thread(lambda: state.take_verdict("r1", published_seq=3))
    state.on_control(watermark("r1", 3))
    thread.join(timeout=5)
    verdict = out["value"]
    assert verdict.allowed and not verdict.timed_out


def test_a_block_arriving_during_the_wait_refuses_the_call() -> None:
    state = ControlState("gw", wait_budget_ms=5_000)
    state.track("r1")
    thread, out = in_thread(lambda: state.take_verdict("r1", published_seq=2))
    state.on_control(block("r1", 2))
    state.on_control(watermark("r1", 2))
    thread.join(timeout=5)
    assert not out["value"].allowed
    assert out["value"].blocked_by.seq == 2


def test_other_runs_records_do_not_wake_a_waiting_call() -> None:
    state = ControlState("gw")
    state.track("r1")
    state.track("r2")
    checks = 0

    def blocked(decisions: list[Decision]) -> bool:
        nonlocal checks
        checks += 1  # once before waiting, then once per wake-up
        return any(d.action is Action.BLOCK for d in decisions)

    thread, out = in_thread(lambda: state.wait_for("r1", blocked, timeout=5))
    deadline = time.monotonic() + 5
    while checks == 0:  # its first check holds the lock until it waits
        assert time.monotonic() < deadline
        time.sleep(0.001)
    for seq in range(1, 201):
        state.on_control(watermark("r2", seq))
        state.on_control(block("r2", seq))
    assert checks == 1
    state.on_control(block("r1", 1))
    thread.join(timeout=5)
    assert [(d.run_id, d.seq) for d in out["value"]] == [("r1", 1)]
    assert checks == 2


def test_a_call_times_out_when_only_other_runs_progress() -> None:
    state = ControlState("gw", wait_budget_ms=30)
    for seq in range(1, 50):
        state.on_control(watermark("r2", seq))
    verdict = state.take_verdict("r1", published_seq=1)
    assert verdict.allowed and verdict.timed_out
    assert state.wait_timeouts == 1


def test_one_batch_record_answers_the_calls_of_each_run_it_holds() -> None:
    seen: list[tuple[str, int]] = []
    state = ControlState(
        "gw", wait_budget_ms=5_000, on_watermark=lambda m: seen.append((m.run_id, m.seq))
    )
    state.track("r1")
    state.track("r2")
    first, out1 = in_thread(lambda: state.take_verdict("r1", published_seq=4))
    second, out2 = in_thread(lambda: state.take_verdict("r2", published_seq=2))
    state.on_control(watermarks(("r1", 4), ("r2", 2), ("r3", 9)))
    first.join(timeout=5)
    second.join(timeout=5)
    for out in (out1, out2):
        assert out["value"].allowed and not out["value"].timed_out
    assert seen == [("r1", 4), ("r2", 2), ("r3", 9)]
    # An older watermark in a later batch moves no run back.
    state.on_control(watermarks(("r1", 1)))
    assert state.take_verdict("r1", published_seq=4).timed_out is False


def test_a_gateway_keeps_only_its_own_runs_of_the_fleet() -> None:
    heard: list[str] = []
    state = ControlState("gw", on_decision=lambda d: heard.append(d.run_id))
    state.track("mine")
    for n in range(5_000):  # the rest of the fleet: every gateway reads the whole topic
        state.on_control(watermarks((f"other-{n}", 3)))
        state.on_control(block(f"other-{n}", 3))
    state.on_control(block("mine", 1))
    assert state.tracked_runs() == 1
    assert state.other_runs == 10_000
    assert len(heard) == 5_001  # on_decision still hears every decision
    assert [d.run_id for d in state.decisions("mine")] == ["mine"]


def test_only_the_last_ended_runs_stay_readable() -> None:
    state = ControlState("gw", ended_runs_kept=2)
    for run_id in ("r1", "r2", "r3"):
        state.track(run_id)
        state.on_control(block(run_id, 1))
        state.track(run_id, ended=True)
    assert state.tracked_runs() == 2
    assert state.decisions("r1") == []  # forgotten (asking tracks it afresh)
    assert [d.seq for d in state.decisions("r3")] == [1]


def test_a_run_published_for_again_after_its_end_is_live_again() -> None:
    state = ControlState("gw", ended_runs_kept=1)
    state.track("r1")
    state.track("r1", ended=True)
    state.track("r1")  # its id used again: live, not among the ended
    state.track("r2")
    state.track("r2", ended=True)
    state.track("r3")
    state.track("r3", ended=True)  # pushes r2 out, never the live r1
    state.on_control(block("r1", 5))
    assert [d.seq for d in state.decisions("r1")] == [5]
    assert state.tracked_runs() == 2


def test_a_tool_block_for_this_gateways_agent_holds_after_its_run_is_forgotten() -> None:
    state = ControlState("gw", ended_runs_kept=0)
    state.track("old")
    state.track("old", ended=True)  # forgotten at once
    state.on_control(block("old", 4, extra={"only_tool": '"exec"'}))
    state.track("new")
    verdict = state.take_verdict("new", 0, tool_name="exec", agent_id="agent")
    assert not verdict.allowed and verdict.blocked_by is not None


def test_observe_only_decisions_are_logged_for_own_runs_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = ControlState("gw")
    state.track("mine")
    state.on_control(block("theirs", 1, enforced=False))
    state.on_control(block("mine", 1, enforced=False))
    lines = [r.getMessage() for r in caplog.records if "observe only" in r.getMessage()]
    assert len(lines) == 1 and "run mine" in lines[0]
