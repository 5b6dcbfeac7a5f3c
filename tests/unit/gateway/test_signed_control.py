"""A gateway with keys (issue 40) obeys only the control records a worker signed for it: a
forged block, watermark or observe-only copy of a real decision changes nothing, and a forged
record never makes the real one a "duplicate"."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from streams.core.events import Action, Decision
from streams.gateway.verdicts import ControlState
from streams.wire.avro import RunWatermark, encode_decision, encode_watermark
from streams.wire.signing import KeyRing

MINE = KeyRing.of({"k1": "gateway-one-secret-0123"})
OTHER = KeyRing.of({"k9": "gateway-two-secret-0123"})
BLOCK = Decision(
    run_id="run-1",
    agent_id="agent",
    gateway_id="gw-1",
    seq=4,
    event_time=0,
    action=Action.BLOCK,
    detector="generic_repeat",
    severity="critical",
    count=20,
    tool_name="exec",
    reason="same call again",
)


def record(value: bytes, ring: KeyRing | None) -> SimpleNamespace:
    headers = ring.headers(value) if ring is not None else []
    return SimpleNamespace(value=value, headers=headers, topic="control", partition=0, offset=1)


def watermark(seq: int, ring: KeyRing | None) -> SimpleNamespace:
    mark = RunWatermark(run_id="run-1", agent_id="agent", gateway_id="gw-1", seq=seq, event_time=0)
    return record(encode_watermark(mark), ring)


def test_a_forged_observe_only_copy_never_suppresses_the_real_block() -> None:
    state = ControlState("gw-1", wait_budget_ms=0, keys=MINE)
    state.track("run-1")
    shadow = encode_decision(replace(BLOCK, enforced=False))  # the same decision id
    state.on_control(record(shadow, None))  # unsigned
    state.on_control(record(shadow, OTHER))  # signed with another gateway's key
    assert state.forged == 2 and state.decisions("run-1") == []
    state.on_control(record(encode_decision(BLOCK), MINE))
    assert state.duplicates == 0
    verdict = state.take_verdict("run-1")
    assert not verdict.allowed and verdict.blocked_by == BLOCK


def test_a_forged_watermark_does_not_answer_a_call() -> None:
    state = ControlState("gw-1", wait_budget_ms=1, fail_mode="closed", keys=MINE)
    state.track("run-1")
    state.on_control(watermark(10_000, None))
    assert state.forged == 1
    assert state.take_verdict("run-1", published_seq=3).timed_out
    state.on_control(watermark(3, MINE))
    assert not state.take_verdict("run-1", published_seq=3).timed_out


def test_records_of_runs_this_gateway_does_not_keep_are_other_runs_not_forgeries() -> None:
    state = ControlState("gw-1", keys=MINE)
    state.on_control(record(encode_decision(replace(BLOCK, run_id="elsewhere")), OTHER))
    assert (state.forged, state.other_runs) == (0, 1)


def test_without_keys_a_gateway_reads_unsigned_records_as_before() -> None:
    state = ControlState("gw-1", wait_budget_ms=0)
    state.track("run-1")
    state.on_control(record(encode_decision(BLOCK), None))
    assert not state.take_verdict("run-1").allowed
