"""The peers' loop rules as the quality benchmark re-implements them: each fires at its
documented threshold, not one call before, and not where the peer says a change is progress."""

from __future__ import annotations

import json

from bench.quality.peer_rules import (
    NONE,
    ClineRepetition,
    GeminiCliToolLoop,
    Level,
    OpenHandsStuck,
    PeerCall,
    PeerEvent,
    PeerResult,
    PeerRule,
    RooCodeRepetition,
)


def call(tool: str = "exec", **args: object) -> PeerCall:
    return PeerCall(tool, json.dumps(args or {"command": "make test"}))


def result(of: PeerCall, output: object = "same", error: str | None = None) -> PeerResult:
    return PeerResult(of.tool, of.args, None if error else json.dumps(output), error)


def shell(of: PeerCall, text: str, exit_code: int) -> PeerResult:
    details = {"status": "completed", "exitCode": exit_code, "aggregated": text}
    return result(of, {"content": [{"type": "text", "text": text}], "details": details})


def levels(rule: PeerRule, events: list[PeerEvent]) -> list[Level]:
    return [rule.see(event).level for event in events]


def calls_and_results(
    calls: list[PeerCall], outputs: list[object] | None = None
) -> list[PeerEvent]:
    outputs = outputs or ["same"] * len(calls)
    return [e for c, out in zip(calls, outputs, strict=True) for e in (c, result(c, out))]


# ------------------------------------------------------------------------------- Roo Code


def test_roo_code_refuses_the_fourth_identical_call_in_a_row() -> None:
    rule = RooCodeRepetition()
    assert levels(rule, [call()] * 3) == [Level.NONE] * 3
    assert rule.see(call()).level == Level.ABORT
    assert rule.see(call()) == NONE  # it resets, so a user can guide it past


def test_roo_code_counts_calls_not_results_and_sorts_keys() -> None:
    rule = RooCodeRepetition()
    a, b = PeerCall("edit", '{"path": "x", "new": 1}'), PeerCall("edit", '{"new": 1, "path": "x"}')
    events = [a, result(a, "1"), b, result(b, "2"), a, result(a, "3"), b]
    assert levels(rule, events)[-1] == Level.ABORT


def test_roo_code_starts_again_after_another_call() -> None:
    rule = RooCodeRepetition()
    events = [call(), call(), call(), call(command="ls"), call(), call(), call()]
    assert set(levels(rule, events)) == {Level.NONE}


# ----------------------------------------------------------------------------- Gemini CLI


def test_gemini_cli_blocks_the_fifth_identical_call_then_ends_the_turn() -> None:
    rule = GeminiCliToolLoop()
    assert levels(rule, [call()] * 4) == [Level.NONE] * 4
    assert rule.see(call()).level == Level.BLOCK
    assert rule.see(call()).level == Level.ABORT  # the history is kept: the next one ends it


def test_gemini_cli_finds_a_cycle_of_two_repeated_five_times() -> None:
    a, b = call(command="edit"), call(command="run")
    rule = GeminiCliToolLoop()
    assert levels(rule, [a, b] * 4 + [a]) == [Level.NONE] * 9
    assert rule.see(b).level == Level.BLOCK
    before_v053 = GeminiCliToolLoop(max_cycle=1)
    assert set(levels(before_v053, [a, b] * 6)) == {Level.NONE}


def test_gemini_cli_compares_args_as_written() -> None:
    a, b = PeerCall("read", '{"path": "x", "n": 1}'), PeerCall("read", '{"n": 1, "path": "x"}')
    assert set(levels(GeminiCliToolLoop(), [a, b, a, b, a, b])) == {Level.NONE}


# ---------------------------------------------------------------------------------- Cline


def test_cline_warns_at_three_and_stops_after_the_fifth_identical_call() -> None:
    rule = ClineRepetition()
    answers = levels(rule, calls_and_results([call()] * 5))
    results = answers[1::2]
    assert set(answers[0::2]) == {Level.NONE}  # it looks once a call has run
    assert results == [Level.NONE, Level.NONE, Level.WARN, Level.NONE, Level.ABORT]


def test_cline_ignores_task_progress_and_resets_on_another_call() -> None:
    steps = [call(command="x", task_progress=f"step {i}") for i in range(4)]
    assert levels(ClineRepetition(), calls_and_results(steps))[1::2][2] == Level.WARN
    mixed = [call(), call(), call(command="ls"), call(), call()]
    assert set(levels(ClineRepetition(), calls_and_results(mixed))) == {Level.NONE}


# ------------------------------------------------------------------------------ OpenHands


def test_openhands_stops_after_four_identical_actions_and_observations() -> None:
    rule = OpenHandsStuck()
    answers = [rule.see(e) for e in calls_and_results([call(tool="read", path="a")] * 4)]
    assert [a.level for a in answers[:-1]] == [Level.NONE] * 7
    assert answers[-1].level == Level.ABORT
    assert answers[-1].rule == "repeating_action_observation"


def test_openhands_is_not_stuck_while_the_observations_change() -> None:
    reads = [call(tool="read", path="a")] * 6
    assert set(levels(OpenHandsStuck(), calls_and_results(reads, list(range(6))))) == {Level.NONE}


def test_openhands_compares_a_shell_result_by_its_exit_code_only() -> None:
    run = call(command="python t.py")
    same_code = [e for i in range(4) for e in (run, shell(run, f"FAIL after {i} s", 1))]
    assert levels(OpenHandsStuck(), same_code)[-1] == Level.ABORT
    codes = [e for i in range(6) for e in (run, shell(run, "out", i))]
    assert set(levels(OpenHandsStuck(), codes)) == {Level.NONE}


def test_openhands_stops_after_three_identical_actions_that_fail() -> None:
    run = call(command="make")
    failures = [e for i in range(3) for e in (run, result(run, error=f"failure {i}"))]
    rule = OpenHandsStuck()
    answers = [rule.see(e) for e in failures]
    assert {a.level for a in answers[:-1]} == {Level.NONE}
    assert (answers[-1].level, answers[-1].rule) == (Level.ABORT, "repeating_action_error")


def test_openhands_finds_the_alternating_pattern_on_the_sixth_pair() -> None:
    a, b = call(tool="edit", path="x", new="1"), call(command="python t.py")
    pairs = [e for _ in range(3) for e in (a, result(a, "edited"), b, shell(b, "FAIL", 1))]
    rule = OpenHandsStuck()
    answers = [rule.see(e) for e in pairs]
    assert {x.level for x in answers[:-1]} == {Level.NONE}
    assert answers[-1].rule == "repeating_action_observation_pattern"
