"""Issue 43, the Python gateway client: a decision worded for the model (``warnings:
"model"``, its note in ``extra["model_note"]``) reaches the host as the note to attach to the
call's tool result, and as a block's refusal text; without a note everything reads as before."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from streams.core.events import Action, Decision
from streams.core.loop_spend import LoopSpend
from streams.core.model_notes import MODEL_NOTE, model_note
from streams.gateway.verdicts import MODEL_NOTE as CLIENT_KEY
from streams.gateway.verdicts import ControlState, RunAborted
from streams.wire.avro import RunWatermark, encode_decision, encode_watermark


def decision(action: Action, seq: int, worded: bool) -> Decision:
    plain = Decision(
        run_id="r1",
        agent_id="agent",
        gateway_id="gw",
        seq=seq,
        event_time=1_700_000_000_000,
        action=action,
        detector="generic_repeat",
        severity="warning" if action is Action.WARN else "critical",
        count=seq,
        tool_name="read",
        reason=f"WARNING: You have called read {seq} times with identical arguments.",
    )
    if not worded:
        return plain
    note = model_note(plain, LoopSpend(3, 1_699_999_990_000, seq - 3, 0, 0))
    return replace(plain, extra={MODEL_NOTE: note})


def record(value: Decision | RunWatermark) -> SimpleNamespace:
    if isinstance(value, Decision):
        return SimpleNamespace(value=encode_decision(value))
    return SimpleNamespace(value=encode_watermark(value))


def mark(seq: int) -> RunWatermark:
    return RunWatermark(run_id="r1", agent_id="agent", gateway_id="gw", seq=seq, event_time=0)


def state_after(*decisions: Decision) -> ControlState:
    state = ControlState("gw", wait_budget_ms=0)
    state.track("r1")
    for one in decisions:
        state.on_control(record(one))
    state.on_control(record(mark(max(d.seq for d in decisions))))
    return state


def test_the_client_reads_the_key_the_core_writes() -> None:
    assert CLIENT_KEY == MODEL_NOTE


def test_a_warnings_note_comes_with_the_next_verdict_for_the_tool_result() -> None:
    warned = decision(Action.WARN, 4, worded=True)
    state = state_after(warned)
    verdict = state.take_verdict("r1")
    assert verdict.allowed
    assert verdict.model_note == warned.extra[MODEL_NOTE]
    assert verdict.model_note.startswith("[loopguard] You have called read")
    assert "going on since 22:13:10 UTC." in verdict.model_note
    assert state.take_verdict("r1").model_note == ""  # handed over once, like the warning


def test_two_warnings_give_both_notes() -> None:
    first, second = decision(Action.WARN, 4, True), decision(Action.WARN, 5, True)
    verdict = state_after(first, second).take_verdict("r1")
    assert verdict.model_note == f"{first.extra[MODEL_NOTE]}\n\n{second.extra[MODEL_NOTE]}"


def test_a_blocks_refusal_text_is_its_note() -> None:
    blocked = decision(Action.BLOCK, 6, worded=True)
    verdict = state_after(blocked).take_verdict("r1")
    assert not verdict.allowed
    assert verdict.reason == blocked.extra[MODEL_NOTE]
    assert verdict.reason.endswith("loopguard refused this call: it did not run.")


def test_an_aborts_note_is_on_the_error() -> None:
    aborted = decision(Action.ABORT, 7, worded=True)
    with pytest.raises(RunAborted) as caught:
        state_after(aborted).take_verdict("r1")
    assert caught.value.model_note == aborted.extra[MODEL_NOTE]
    assert "loopguard stopped this run" in caught.value.model_note


def test_without_notes_everything_reads_as_before() -> None:
    warned, blocked = decision(Action.WARN, 4, False), decision(Action.BLOCK, 6, False)
    assert state_after(warned).take_verdict("r1").model_note == ""
    verdict = state_after(blocked).take_verdict("r1")
    assert verdict.reason == blocked.reason
