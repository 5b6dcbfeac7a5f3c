"""The failure rules of issue 17: ``consecutiveErrors`` (failed calls in a row, whatever the
tool or args) and ``errorRepeat`` (the same call failing with the same error), through the
real engine. Counting convention as every detector: earlier outcomes only."""

from __future__ import annotations

import json

import pytest
from core_helpers import VETO, Run, guard, loop_guard, summary, text_result
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.config import resolve
from streams.core.events import Envelope, ToolCall, ToolResult
from streams.core.failures import next_error_streak
from streams.core.run_state import RunState

NO_REFERENCE_RULES = {"genericRepeat": False, "knownPollNoProgress": False, "pingPong": False}


def on(**block):
    return loop_guard(enabled=True, **block)


def failing(run: Run, n: int, error=lambda i: f"ENOENT: no such file /f{i}", tool=None):
    """``n`` failing cycles, each a different call (a different tool every other one)."""
    out = {}
    for i in range(n):
        name = tool or ("read" if i % 2 else "exec")
        decided = run.cycle(name, {"path": f"/f{i}"}, error=error(i))
        if decided:
            out[len(run.events) - 1] = summary(decided)[0]
    return out


# -- consecutiveErrors -------------------------------------------------------------------


def test_consecutive_errors_defaults_across_tools_and_args():
    run = Run(on())
    failing(run, 13)
    got = [(d.action.value, d.detector, d.count) for d in run.decisions]
    assert got == [
        *[("warn", "consecutive_errors", n) for n in range(5, 10)],  # calls 6-10
        ("block", "consecutive_errors", 10),  # call 11: 10 earlier failures
        ("block", "consecutive_errors", 10),  # the veto is no outcome: the streak stands
        ("abort", "consecutive_errors", 10),  # third block: loop_persisted_after_block
    ]
    assert run.decisions[-1].error_code == "loop_persisted_after_block"
    assert "last 10 tool calls all failed" in run.decisions[-2].reason


def test_consecutive_errors_thresholds_are_configurable():
    run = Run(on(consecutiveErrors={"warningThreshold": 2, "criticalThreshold": 3}))
    failing(run, 4)
    assert summary(run.decisions) == [
        ("warn", "consecutive_errors", 2),
        ("block", "consecutive_errors", 3),
    ]


def test_one_success_ends_the_streak():
    run = Run(on(consecutiveErrors={"warningThreshold": 3, "criticalThreshold": 4}))
    failing(run, 3)
    assert run.cycle("read", {"path": "/ok"}, text_result("fine")) == [
        run.decisions[-1]
    ]  # the call after 3 failures warns; its success resets
    assert run.decisions[-1].detector == "consecutive_errors"
    assert failing(run, 3) == {}  # 3 new failures: the 4th call would warn again
    assert summary(run.call("read", {"path": "/x"})) == [("warn", "consecutive_errors", 3)]


def test_a_result_with_nothing_in_it_neither_fails_nor_succeeds():
    run = Run(on(consecutiveErrors={"warningThreshold": 2, "criticalThreshold": 9}))
    failing(run, 1)
    run.plain_cycle("read", {"path": "/quiet"})  # no result, no error: no outcome
    failing(run, 1)
    assert summary(run.call("read", {"path": "/next"})) == [("warn", "consecutive_errors", 2)]


def test_an_empty_error_is_a_failure():
    run = Run(on(consecutiveErrors={"warningThreshold": 2, "criticalThreshold": 9}))
    failing(run, 2, error=lambda i: "")
    assert summary(run.call("read", {"path": "/x"})) == [("warn", "consecutive_errors", 2)]


def test_a_failed_exec_command_is_not_a_failed_call():
    """exec that ran and exited non-zero reported a result: a command outcome, not an error."""
    run = Run(on(consecutiveErrors={"warningThreshold": 2, "criticalThreshold": 9}))
    for i in range(5):
        failed = {"details": {"status": "failed", "exitCode": 1, "aggregated": f"err {i}"}}
        assert run.cycle("exec", {"command": f"make t{i}"}, failed) == []


def test_switch_and_enabled_turn_it_off():
    for block in (
        {"enabled": True, "detectors": {"consecutiveErrors": False}},
        {},  # enabled unset: no rolling detector runs
        {"enabled": False},
    ):
        run = Run(loop_guard(**block))
        assert failing(run, 15) == {}, block


def test_the_reference_critical_wins_over_a_failure_critical():
    block = {"unknownToolThreshold": 3, "consecutiveErrors": {"criticalThreshold": 3}}
    run = Run(on(**block, abortAfterBlocks=99))
    failing(run, 3, error=lambda i: "Unknown tool: browser", tool="browser")
    assert summary(run.call("browser", {"path": "/next"})) == [("block", "unknown_tool_repeat", 3)]


def test_a_failure_critical_wins_over_a_reference_warning():
    block = {
        "warningThreshold": 2,
        "consecutiveErrors": {"warningThreshold": 1, "criticalThreshold": 2},
    }
    run = Run(on(**block, errorRepeatThreshold=50))
    run.cycle("read", {"p": 1}, error="boom")
    run.cycle("read", {"p": 1}, error="bang")
    # generic repeat would warn (2 earlier identical calls); 2 failures in a row block
    assert summary(run.call("read", {"p": 1})) == [("block", "consecutive_errors", 2)]


def test_a_reference_warning_stands_over_a_failure_warning():
    block = {"warningThreshold": 2, "consecutiveErrors": {"warningThreshold": 1}}
    run = Run(on(**block, errorRepeatThreshold=50))
    run.cycle("read", {"p": 1}, error="boom")
    run.cycle("read", {"p": 1}, error="bang")
    assert summary(run.call("read", {"p": 1})) == [("warn", "generic_repeat", 2)]


# -- errorRepeat -------------------------------------------------------------------------


def test_error_repeat_blocks_the_fifth_identical_failure():
    run = Run(on())
    got = [
        summary(run.cycle("exec", {"command": "make"}, error="make: *** No rule")) for _ in range(7)
    ]
    assert got == [
        [],
        [],
        [],
        [],
        [("block", "error_repeat", 4)],  # 4 earlier identical failures
        [("block", "error_repeat", 5)],  # the veto repeats the error: the streak grows
        [("abort", "error_repeat", 6)],
    ]
    assert run.decisions[0].result_hash.startswith("error:")
    assert "failed 4 times" in run.decisions[0].reason


@pytest.mark.parametrize("threshold", [1, 2, 5])
def test_error_repeat_threshold_is_configurable(threshold):
    run = Run(on(errorRepeatThreshold=threshold, abortAfterBlocks=99))
    calls = [run.cycle("read", {"p": 1}, error="EACCES") for _ in range(threshold + 1)]
    assert [bool(c) for c in calls] == [False] * threshold + [True]
    assert summary(calls[-1]) == [("block", "error_repeat", threshold)]


def test_error_repeat_needs_the_same_error_and_the_same_args():
    run = Run(on(detectors=NO_REFERENCE_RULES | {"consecutiveErrors": False}))
    for i in range(8):
        assert run.cycle("read", {"p": 1}, error=f"EIO at block {i}") == []  # errors differ
    for i in range(8):
        assert run.cycle("read", {"p": i}, error="EIO") == []  # args differ


def test_error_repeat_counts_the_calls_streak_across_other_calls():
    """Like every no-progress streak: the call's own outcomes, other calls in between."""
    run = Run(on(detectors={"consecutiveErrors": False}))
    for _ in range(4):
        run.cycle("read", {"p": 1}, error="EIO")
        run.cycle("list", {"d": 1}, text_result("ok"))
    assert summary(run.call("read", {"p": 1})) == [("block", "error_repeat", 4)]


def test_a_success_of_the_same_call_ends_the_error_streak():
    run = Run(on())
    run.cycle("read", {"p": 1}, error="EIO")
    run.cycle("read", {"p": 1}, error="EIO")
    run.cycle("read", {"p": 1}, text_result("ok"))
    run.cycle("read", {"p": 1}, error="EIO")
    assert run.call("read", {"p": 1}) == []


def test_error_repeat_switch():
    run = Run(on(detectors={"errorRepeat": False}))
    got = [summary(run.cycle("read", {"p": 1}, error="EIO")) for _ in range(6)]
    assert got[-1] == [("warn", "consecutive_errors", 5)]
    assert all(d.detector == "consecutive_errors" for d in run.decisions)


def test_error_repeat_per_agent():
    doc = {
        "tools": {"loopDetection": {"enabled": True}},
        "agents": {
            "list": [{"id": "lax", "tools": {"loopDetection": {"errorRepeatThreshold": 6}}}]
        },
    }
    lg = guard(doc)
    strict, lax = Run(lg, run_id="s", agent_id="strict"), Run(lg, run_id="l", agent_id="lax")
    for _ in range(5):
        strict.cycle("read", {"p": 1}, error="EIO")
        lax.cycle("read", {"p": 1}, error="EIO")
    assert summary(strict.decisions) == [("block", "error_repeat", 4)]
    assert lax.decisions == []


# -- state -------------------------------------------------------------------------------


def test_the_streak_survives_a_state_round_trip_and_old_states_load():
    run = Run(on())
    failing(run, 4)
    state = run.lg.runs[run.run_id]
    assert state.error_streak == 4
    data = state.to_dict()
    assert RunState.from_dict(json.loads(json.dumps(data))).error_streak == 4
    data.pop("error_streak")  # a state written before issue 17
    assert RunState.from_dict(data).error_streak == 0


# -- properties --------------------------------------------------------------------------

# What a ToolResult can say: fail (error), succeed (a result), nothing, or the loop veto.
KINDS = st.lists(st.sampled_from(["fail", "ok", "none", "veto"]), max_size=60)


def naive_streak(kinds: list[str]) -> int:
    """Trailing failures, walking back over the outcomes and skipping what is not one."""
    streak = 0
    for kind in reversed(kinds):
        if kind in ("none", "veto"):
            continue
        if kind == "ok":
            break
        streak += 1
    return streak


@settings(max_examples=200, deadline=None)
@given(KINDS)
def test_next_error_streak_is_the_trailing_failure_count(kinds):
    streak = 0
    for kind in kinds:
        if kind != "none":  # no outcome never reaches the streak
            streak = next_error_streak(streak, kind == "fail", kind == "veto")
    assert streak == naive_streak(kinds)


@settings(max_examples=150, deadline=None)
@given(KINDS, st.integers(1, 6), st.integers(1, 8))
def test_consecutive_errors_fires_exactly_at_its_thresholds(kinds, warning, span):
    """Each call is a different one, so nothing but the failure streak can fire."""
    cfg = resolve(
        {
            "enabled": True,
            "consecutiveErrors": {"warningThreshold": warning, "criticalThreshold": warning + span},
            "abortAfterBlocks": 10_000,
        }
    )
    state = RunState("r")
    seq = 0

    def env() -> Envelope:
        nonlocal seq
        seq += 1
        return Envelope("r", "a", "g", seq, seq)

    for i, kind in enumerate(kinds):
        expected_streak = naive_streak(kinds[:i])
        decided = state.apply(ToolCall(env(), f"t{i % 3}", json.dumps({"i": i}), f"c{i}"), cfg)
        if expected_streak >= warning + span:
            assert summary(decided) == [("block", "consecutive_errors", expected_streak)]
        elif expected_streak >= warning:
            assert summary(decided) == [("warn", "consecutive_errors", expected_streak)]
        else:
            assert decided == []
        result = {
            "fail": (None, "boom"),
            "ok": (json.dumps(text_result("fine")), None),
            "none": (None, None),
            "veto": (json.dumps(VETO), None),
        }[kind]
        state.apply(ToolResult(env(), f"t{i % 3}", None, *result, f"c{i}"), cfg)
    assert state.error_streak == naive_streak(kinds)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["E1", "E2", "ok"]), max_size=30), st.integers(1, 5))
def test_error_repeat_fires_iff_the_trailing_identical_errors_reach_it(outcomes, threshold):
    cfg = resolve(
        {
            "enabled": True,
            "historySize": 100,
            "errorRepeatThreshold": threshold,
            "detectors": {"consecutiveErrors": False} | NO_REFERENCE_RULES,
            "globalCircuitBreakerThreshold": 10_000,
            "abortAfterBlocks": 10_000,
        }
    )
    run = Run(loop_guard())
    run.lg.configs = lambda _agent: cfg  # the resolved config, as a host hands it in
    for i, outcome in enumerate(outcomes):
        tail = 0
        for earlier in reversed(outcomes[:i]):
            if earlier != (outcomes[i - 1] if i else None) or earlier == "ok":
                break
            tail += 1
        decided = run.call("read", {"p": 1})
        if tail >= threshold:
            assert summary(decided) == [("block", "error_repeat", tail)]
        else:
            assert decided == []
        if outcome == "ok":
            run.result("read", {"p": 1}, text_result("fine"))
        else:
            run.result("read", {"p": 1}, error=outcome)
