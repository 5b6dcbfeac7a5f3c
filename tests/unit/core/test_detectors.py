"""The rolling-history detectors, one rule at a time, through the real engine.

Counting convention (README, "Counting"): detectors run when a ToolCall arrives, against the
history *before* that call is recorded, so every count is the number of *previous* calls that
form the pattern the current call continues (a generic-repeat count is the previous identical
calls, a ping-pong count the previous calls of the alternation). ``Run.cycle`` answers a
BLOCK like the gateway does: with the loop veto result instead of the tool's own result.
"""

from __future__ import annotations

import pytest
from core_helpers import (
    VETO,
    Run,
    dumps,
    exec_result,
    guard,
    loop_guard,
    one,
    poll_result,
    summary,
    text_result,
)

from streams.core.events import Action, ToolResult
from streams.core.hashing import args_hash

READ = {"path": "/etc/hosts"}
WRITE = {"path": "/tmp/out", "content": "x"}
POLL = {"action": "poll", "sessionId": "s-1"}
# The failure rules (issue 17) are switched off where a test is about the reference's own
# rules and drives them with failing calls.
NO_FAILURE_RULES = {"consecutiveErrors": False, "errorRepeat": False}
ALL_OFF = {
    "genericRepeat": False,
    "knownPollNoProgress": False,
    "pingPong": False,
    **NO_FAILURE_RULES,
}
SMALL = {"warningThreshold": 3, "criticalThreshold": 5, "globalCircuitBreakerThreshold": 7}


def on(**block):
    return loop_guard(enabled=True, **block)


def repeat(run, n, tool, args, result=lambda i: text_result("same"), **kw):
    """``n`` cycles of the same call; returns {call number: (action, detector, count)}."""
    out = {}
    for i in range(n):
        decided = run.cycle(tool, args, result(i), **kw)
        if decided:
            d = one(decided)
            out[i + 1] = (d.action.value, d.detector, d.count)
    return out


def alternate(run, n, a=("read", READ), b=("write", WRITE), ra=None, rb=None):
    """``n`` calls alternating A, B, A, B …; returns {call number: (action, detector, count)}."""
    ra = ra or (lambda i: text_result("A"))
    rb = rb or (lambda i: text_result("B"))
    out = {}
    for i in range(n):
        tool, args = a if i % 2 == 0 else b
        result = ra(i // 2) if i % 2 == 0 else rb(i // 2)
        decided = run.cycle(tool, args, result)
        if decided:
            d = one(decided)
            out[i + 1] = (d.action.value, d.detector, d.count)
    return out


# -- generic repeat ----------------------------------------------------------------------


def test_generic_repeat_defaults():
    got = repeat(Run(on()), 23, "read", READ)
    assert got == {
        **{n: ("warn", "generic_repeat", n - 1) for n in range(11, 21)},
        21: ("block", "generic_repeat", 20),
        22: ("block", "generic_repeat", 21),  # the veto repeated the outcome: streak grows
        23: ("abort", "generic_repeat", 22),  # third block in the run
    }


def test_generic_repeat_small_thresholds():
    got = repeat(Run(on(**SMALL)), 7, "read", READ)
    assert got == {
        4: ("warn", "generic_repeat", 3),
        5: ("warn", "generic_repeat", 4),
        6: ("block", "generic_repeat", 5),
        7: ("block", "generic_repeat", 6),
    }


def test_generic_repeat_changing_results_never_block():
    got = repeat(Run(on()), 80, "read", READ, lambda i: text_result(f"v{i}"))
    assert {v[0] for v in got.values()} == {"warn"}
    assert min(got) == 11
    assert got[11] == ("warn", "generic_repeat", 10)
    # the count is over the history window, so it saturates at historySize
    assert got[80] == ("warn", "generic_repeat", 30)


def test_generic_repeat_one_different_result_restarts_the_streak():
    run = Run(on(**SMALL, abortAfterBlocks=99))
    results = ["same"] * 4 + ["other"] + ["same"] * 6
    got = repeat(run, len(results), "read", READ, lambda i: text_result(results[i]))
    # streak at call n = identical results ending at call n-1
    assert got[6] == ("warn", "generic_repeat", 5)  # 5 previous calls, streak only 1
    assert got[11] == ("block", "generic_repeat", 5)
    assert all(v[0] == "warn" for n, v in got.items() if n < 11)


def test_generic_repeat_without_results_only_warns():
    run = Run(on(**SMALL))
    decided = [run.call("read", READ) for _ in range(10)]
    assert {d.action for ds in decided for d in ds} == {Action.WARN}
    assert [one(ds).count for ds in decided[3:]] == [3, 4, 5, 6, 7, 8, 9]


def test_generic_repeat_errors_are_outcomes():
    got = repeat(
        Run(on(**SMALL, detectors=NO_FAILURE_RULES)),
        6,
        "read",
        READ,
        result=lambda i: None,
        error="EACCES: permission denied",
    )
    assert got[6] == ("block", "generic_repeat", 5)


def test_generic_repeat_distinguishes_args():
    run = Run(on(**SMALL))
    for i in range(9):  # each path is called 3 times: 2 previous calls, below warning 3
        assert run.cycle("read", {"path": f"/f{i % 3}"}, text_result("same")) == []


def test_exec_timestamps_do_not_keep_a_loop_at_warning():
    def stamped(i):
        return exec_result(f"2024-01-01T00:00:{i:02d}Z FAIL test_x (pid {1000 + i})", exit_code=1)

    got = repeat(Run(on(**SMALL)), 6, "exec", {"command": "pytest"}, stamped)
    assert got[6] == ("block", "generic_repeat", 5)


def test_exec_output_that_differs_only_by_a_newline_blocks_at_critical():
    outputs = ["ok", "ok\n", "ok \n", "\nok"]
    got = repeat(Run(on()), 21, "exec", {"command": "make"}, lambda i: exec_result(outputs[i % 4]))
    assert got[11] == ("warn", "generic_repeat", 10)
    assert got[21] == ("block", "generic_repeat", 20)


def test_exec_exit_code_written_as_a_float_is_still_progress():
    codes = [1.0, 2.0]
    got = repeat(
        Run(on(**SMALL)),
        8,
        "exec",
        {"command": "make"},
        lambda i: exec_result("boom", status="failed", exit_code=codes[i % 2]),
    )
    assert all(action == "warn" for action, _, _ in got.values())


def null_result(run, tool="lookup", args=None):
    return ToolResult(run.envelope(), tool, dumps({"id": 1} if args is None else args), "null")


def test_a_tool_that_keeps_returning_null_blocks():
    run = Run(on(**SMALL))
    got = {}
    for i in range(7):
        decided = run.call("lookup", {"id": 1})
        if decided:
            got[i + 1] = summary(decided)[0]
        result = VETO if decided and decided[0].action is not Action.WARN else None
        run.feed(run.make_result("lookup", {"id": 1}, result) if result else null_result(run))
    assert got[4] == ("warn", "generic_repeat", 3)
    assert got[6] == ("block", "generic_repeat", 5)
    assert got[7] == ("block", "generic_repeat", 6)


def test_update_plan_wording_churn_is_no_progress():
    # A deliberate deviation (README): loopguard hashes update_plan by its status pattern,
    # a newer upstream rule the reference build does not have, so reworded plans still block.
    def plan(i):
        return {"plan": [{"step": f"try approach {i}", "status": "in_progress"}]}

    run = Run(on(**SMALL))
    got = {}
    for i in range(6):
        decided = run.cycle("update_plan", plan(i), text_result(f"Plan updated ({i})", **plan(i)))
        if decided:
            got[i + 1] = summary(decided)[0]
    assert got[4] == ("warn", "generic_repeat", 3)
    assert got[6] == ("block", "generic_repeat", 5)


def test_conversations_turn_replies_with_fresh_ids_block():
    def turn(i):
        return {"details": {"status": "replied", "messageId": f"m-{i}", "reply": "same"}}

    got = repeat(Run(on(**SMALL)), 6, "conversations_turn", {"conversationRef": "c"}, turn)
    assert got[6] == ("block", "generic_repeat", 5)


# -- known poll --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args", "result"),
    [
        ("process", POLL, poll_result("running", "")),
        ("process", {"action": "log", "sessionId": "s-1"}, {"details": {"totalLines": 3}}),
        ("command_status", {"commandId": "c1"}, text_result("RUNNING")),
    ],
)
def test_known_poll_small_thresholds(tool, args, result):
    got = repeat(Run(on(**SMALL)), 7, tool, args, lambda i: result)
    assert got == {
        4: ("warn", "known_poll_no_progress", 3),
        5: ("warn", "known_poll_no_progress", 4),
        6: ("block", "known_poll_no_progress", 5),
        7: ("block", "known_poll_no_progress", 6),
    }


def test_known_poll_defaults():
    got = repeat(Run(on()), 22, "process", POLL, lambda i: poll_result())
    assert got[11] == ("warn", "known_poll_no_progress", 10)
    assert got[20] == ("warn", "known_poll_no_progress", 19)
    assert got[21] == ("block", "known_poll_no_progress", 20)
    assert min(got) == 11


def test_known_poll_with_progress_is_silent():
    # polls are expected to repeat; as long as the output moves, nothing is flagged
    got = repeat(Run(on(**SMALL)), 30, "process", POLL, lambda i: poll_result("running", f"{i}"))
    assert got == {}


def test_known_poll_is_excluded_from_generic_repeat():
    block = dict(SMALL, globalCircuitBreakerThreshold=50, detectors={"knownPollNoProgress": False})
    got = repeat(Run(on(**block)), 30, "process", POLL, lambda i: poll_result())
    assert got == {}
    # while an ordinary tool with the same history is flagged by generic repeat
    got = repeat(Run(on(**block)), 5, "process", {"action": "list"}, lambda i: poll_result())
    assert got[4] == ("warn", "generic_repeat", 3)


def test_known_poll_results_without_args_use_the_calls_action():
    run = Run(on(**SMALL))
    for i in range(7):
        run.call("process", POLL, call_id=f"c{i}")
        run.result("process", result=poll_result(), call_id=f"c{i}", omit_args=True)
    assert [d.detector for d in run.decisions] == ["known_poll_no_progress"] * 4


# -- ping-pong ---------------------------------------------------------------------------


def test_ping_pong_defaults_stable():
    got = alternate(Run(on()), 22)
    assert got[11] == ("warn", "ping_pong", 10)  # 10 earlier calls alternate, like generic
    assert got[20] == ("warn", "ping_pong", 19)
    assert got[21] == ("block", "ping_pong", 20)
    assert got[22] == ("block", "ping_pong", 21)
    assert min(got) == 11


def test_ping_pong_small_thresholds():
    run = Run(on(**SMALL, abortAfterBlocks=99))
    got = alternate(run, 7)
    assert got == {
        4: ("warn", "ping_pong", 3),
        5: ("warn", "ping_pong", 4),
        6: ("block", "ping_pong", 5),
        7: ("block", "ping_pong", 6),
    }
    assert run.decisions[-1].paired_tool_name == "write"
    assert run.decisions[-2].paired_tool_name == "read"


@pytest.mark.parametrize("side", ["a", "b", "both"])
def test_ping_pong_changing_outputs_warn_but_never_block(side):
    changing = lambda i: text_result(f"v{i}")  # noqa: E731
    stable = None
    ra = changing if side in ("a", "both") else stable
    rb = changing if side in ("b", "both") else stable
    got = alternate(Run(on()), 60, ra=ra, rb=rb)
    assert min(got) == 11
    assert {v[:2] for v in got.values()} == {("warn", "ping_pong")}


def test_ping_pong_one_odd_result_in_the_window_prevents_block():
    # B answers differently once; while that call is in the 30-call window: warning only
    def rb(i):
        return text_result("B-odd" if i == 2 else "B")

    got = alternate(Run(on(abortAfterBlocks=99, globalCircuitBreakerThreshold=100)), 40, rb=rb)
    blocks = sorted(n for n, v in got.items() if v[0] == "block")
    # call 6 carried the odd result; it leaves the 30-call window after call 36
    assert blocks[0] == 37
    assert all(got[n][0] == "warn" for n in range(11, 37))


def test_ping_pong_same_tool_different_args():
    got = alternate(Run(on(**SMALL)), 6, a=("read", {"path": "a"}), b=("read", {"path": "b"}))
    assert got[4] == ("warn", "ping_pong", 3)
    assert got[6] == ("block", "ping_pong", 5)


def test_ping_pong_needs_the_expected_next_call():
    run = Run(on(**SMALL))
    alternate(run, 4)  # A B A B: call 4 already warns
    run.decisions.clear()
    # the expected next call is A; repeating B is not ping-pong
    assert run.cycle("write", WRITE, text_result("B")) == []
    # a third call C is not ping-pong either
    assert run.cycle("list", {"dir": "/"}, text_result("C")) == []


def test_ping_pong_requires_at_least_two_alternating_calls():
    run = Run(on(warningThreshold=2, criticalThreshold=3, globalCircuitBreakerThreshold=50))
    assert run.cycle("read", READ, text_result("A")) == []
    assert run.cycle("write", WRITE, text_result("B")) == []  # no history of A/B yet
    # A after A, B: two earlier calls alternate (generic repeat sees one earlier A)
    assert summary(run.cycle("read", READ, text_result("A"))) == [("warn", "ping_pong", 2)]


def test_ping_pong_pending_results_are_not_evidence_of_no_progress():
    run = Run(on(**SMALL))
    for i in range(12):
        tool, args = ("read", READ) if i % 2 == 0 else ("write", WRITE)
        run.call(tool, args)  # results never arrive
    assert {(d.action, d.detector) for d in run.decisions} == {(Action.WARN, "ping_pong")}


# -- unknown tool ------------------------------------------------------------------------


def unknown(run, n, tool="browser", error="Unknown tool: browser", same_args=False):
    out = {}
    for i in range(n):
        args = {} if same_args else {"url": f"https://e.com/{i}"}
        decided = run.cycle(tool, args, error=error)
        if decided:
            d = one(decided)
            out[i + 1] = (d.action.value, d.detector, d.count)
    return out


def test_unknown_tool_defaults_with_changing_args():
    got = unknown(Run(on(detectors=NO_FAILURE_RULES)), 11)
    assert got == {11: ("block", "unknown_tool_repeat", 10)}


def test_unknown_tool_even_with_all_detectors_off():
    got = unknown(Run(on(detectors=ALL_OFF, unknownToolThreshold=3)), 4)
    assert got == {4: ("block", "unknown_tool_repeat", 3)}


def test_unknown_tool_reason_names_the_missing_tool():
    run = Run(on(unknownToolThreshold=2))
    unknown(run, 3, tool="web", error="tool web.search not found")
    d = run.decisions[-1]
    assert "web.search" in d.reason and "2 times" in d.reason
    assert d.severity == "critical" and d.extra == {"blocks": "1"}


def test_unknown_tool_streak_breaks_on_another_tool_or_name():
    run = Run(on(unknownToolThreshold=3))
    unknown(run, 2)
    run.cycle("read", READ, text_result("ok"))  # a different tool in between
    assert unknown(run, 3) == {}
    run2 = Run(on(unknownToolThreshold=3), run_id="r2")
    unknown(run2, 2, error="Unknown tool: browser")
    assert unknown(run2, 3, error="Unknown tool: browser_v2") == {}
    assert unknown(run2, 1, error="Unknown tool: browser_v2") == {
        1: ("block", "unknown_tool_repeat", 3)
    }


def test_unknown_tool_ordinary_errors_do_not_count():
    got = unknown(Run(on(unknownToolThreshold=3, detectors=ALL_OFF)), 10, error="timeout")
    assert got == {}


@pytest.mark.parametrize("same_args", [False, True], ids=["changing-args", "same-args"])
def test_unknown_tool_block_is_sticky_and_escalates(same_args):
    got = unknown(Run(on(detectors=NO_FAILURE_RULES)), 13, same_args=same_args)
    assert got == {
        11: ("block", "unknown_tool_repeat", 10),
        12: ("block", "unknown_tool_repeat", 11),
        13: ("abort", "unknown_tool_repeat", 12),
    }


# -- global circuit breaker --------------------------------------------------------------


def test_breaker_with_all_detectors_disabled():
    run = Run(on(detectors=ALL_OFF))
    got = repeat(run, 32, "read", READ)
    assert got == {31: ("abort", "global_circuit_breaker", 30), 32: ("abort", "run_aborted", 1)}
    d = run.decisions[0]
    assert d.error_code == "global_circuit_breaker"
    assert "circuit breaker" in d.reason


def test_breaker_small_threshold():
    got = repeat(Run(on(**SMALL, detectors=ALL_OFF)), 8, "read", READ)
    assert got == {8: ("abort", "global_circuit_breaker", 7)}


def test_breaker_catches_a_stable_ping_pong_loop():
    # the reference counted the breaker per tool, so this loop escaped it
    run = Run(on(detectors=ALL_OFF))
    got = alternate(run, 32)
    assert got[31] == ("abort", "global_circuit_breaker", 30)
    assert min(got) == 31
    assert run.decisions[0].paired_tool_name == "write"
    assert "alternated" in run.decisions[0].reason


def test_breaker_ignores_changing_ping_pong():
    got = alternate(Run(on(detectors=ALL_OFF)), 80, ra=lambda i: text_result(f"{i}"))
    assert got == {}


def test_breaker_ignores_changing_repeats():
    got = repeat(Run(on(detectors=ALL_OFF)), 80, "read", READ, lambda i: text_result(f"{i}"))
    assert got == {}


# -- detector switches -------------------------------------------------------------------


def scenarios(block):
    """Detectors seen for a generic loop, a poll loop and a ping-pong loop (own runs)."""
    lg = on(**dict(SMALL, globalCircuitBreakerThreshold=100, abortAfterBlocks=99), **block)
    seen = {}
    for name, play in (
        ("generic", lambda r: repeat(r, 8, "read", READ)),
        ("poll", lambda r: repeat(r, 8, "process", POLL, lambda i: poll_result())),
        ("pingpong", lambda r: alternate(r, 8, a=("read", {"p": 1}), b=("list", {"d": 1}))),
    ):
        got = play(Run(lg, run_id=name))
        seen[name] = {v[1] for v in got.values()}
    return seen


def test_all_detectors_on():
    assert scenarios({}) == {
        "generic": {"generic_repeat"},
        "poll": {"known_poll_no_progress"},
        "pingpong": {"ping_pong"},
    }


@pytest.mark.parametrize(
    ("switch", "silenced"),
    [("genericRepeat", "generic"), ("knownPollNoProgress", "poll"), ("pingPong", "pingpong")],
)
def test_each_switch_disables_only_its_detector(switch, silenced):
    seen = scenarios({"detectors": {switch: False}})
    expected = scenarios({})
    expected[silenced] = set()
    if silenced == "pingpong":
        # with 8 calls each side repeats 4 times: generic repeat notices A (count 3)
        expected[silenced] = {"generic_repeat"}
    assert seen == expected


@pytest.mark.parametrize("enabled", [None, False], ids=["unset", "false"])
def test_rolling_detectors_off_unless_enabled_true(enabled):
    block = dict(SMALL, unknownToolThreshold=2)
    if enabled is not None:
        block["enabled"] = enabled
    lg = guard(block)
    assert repeat(Run(lg, run_id="g"), 20, "read", READ) == {}
    assert repeat(Run(lg, run_id="p"), 20, "process", POLL, lambda i: poll_result()) == {}
    assert alternate(Run(lg, run_id="pp"), 20) == {}
    assert unknown(Run(lg, run_id="u"), 20) == {}


# -- order of precedence -----------------------------------------------------------------


def test_unknown_tool_wins_over_breaker():
    block = {
        "warningThreshold": 2,
        "criticalThreshold": 3,
        "globalCircuitBreakerThreshold": 4,
        "detectors": ALL_OFF,  # keep generic repeat from blocking (and vetoing) first
    }
    got = unknown(Run(on(**block, unknownToolThreshold=4)), 5, same_args=True)
    # call 5: unknown streak 4 >= 4 and identical no-progress streak 4 >= breaker 4
    assert got[5] == ("block", "unknown_tool_repeat", 4)
    got = unknown(Run(on(**block, unknownToolThreshold=5)), 5, same_args=True)
    assert got[5] == ("abort", "global_circuit_breaker", 4)


def test_breaker_wins_over_known_poll():
    run = Run(on(**SMALL, abortAfterBlocks=99))
    got = repeat(run, 8, "process", POLL, lambda i: poll_result())
    assert got[7] == ("block", "known_poll_no_progress", 6)
    assert got[8] == ("abort", "global_circuit_breaker", 7)


def test_known_poll_wins_over_ping_pong():
    run = Run(on(**dict(SMALL, globalCircuitBreakerThreshold=50), abortAfterBlocks=99))
    got = alternate(run, 7, a=("process", POLL), ra=lambda i: poll_result())
    assert got[4] == ("warn", "ping_pong", 3)
    assert got[6] == ("block", "ping_pong", 5)
    # call 7: poll streak 3 (warning) and a stable ping-pong of 6 (critical): poll comes first
    assert got[7] == ("warn", "known_poll_no_progress", 3)


def test_ping_pong_wins_over_generic_repeat():
    # A stable, B changing: generic would block A (streak >= critical), ping-pong only warns
    run = Run(on(**dict(SMALL, globalCircuitBreakerThreshold=50)))
    got = alternate(run, 16, rb=lambda i: text_result(f"B{i}"))
    assert got[11] == ("warn", "ping_pong", 10)  # A's streak is 5 here
    assert {v[:2] for v in got.values()} == {("warn", "ping_pong")}
    # generic alone would block
    run = Run(on(**dict(SMALL, globalCircuitBreakerThreshold=50, detectors={"pingPong": False})))
    got = alternate(run, 16, rb=lambda i: text_result(f"B{i}"))
    assert got[11] == ("block", "generic_repeat", 5)


def test_breaker_wins_over_ping_pong_block():
    run = Run(on(**SMALL, abortAfterBlocks=99))
    got = alternate(run, 8)
    assert got[7] == ("block", "ping_pong", 6)
    assert got[8] == ("abort", "global_circuit_breaker", 7)


# -- blocks are outcomes; escalation -----------------------------------------------------


def test_veto_keeps_streak_growing_to_escalation_abort():
    run = Run(on(**dict(SMALL, globalCircuitBreakerThreshold=50)))
    got = repeat(run, 9, "read", READ)
    assert got == {
        4: ("warn", "generic_repeat", 3),
        5: ("warn", "generic_repeat", 4),
        6: ("block", "generic_repeat", 5),
        7: ("block", "generic_repeat", 6),
        8: ("abort", "generic_repeat", 7),
        9: ("abort", "run_aborted", 3),
    }
    abort = run.decisions[4]
    assert abort.error_code == "loop_persisted_after_block"
    assert "Blocked 3 times" in abort.reason
    assert abort.extra == {"blocks": "3"}


def test_veto_keeps_streak_growing_to_the_breaker():
    run = Run(on(abortAfterBlocks=1000))
    got = repeat(run, 31, "read", READ)
    assert [got[n][0] for n in range(21, 31)] == ["block"] * 10
    assert got[31] == ("abort", "global_circuit_breaker", 30)


def test_without_the_veto_result_the_streak_would_freeze():
    # a block whose result never arrives leaves the streak where it was
    run = Run(on(**SMALL, abortAfterBlocks=1000))
    repeat(run, 5, "read", READ)
    counts = [one(run.call("read", READ)).count for _ in range(5)]
    assert counts == [5, 5, 5, 5, 5]


def test_veto_as_first_outcome_still_counts():
    # the first result of a signature is the veto itself: it is still an outcome
    run = Run(on(**dict(SMALL, globalCircuitBreakerThreshold=8, abortAfterBlocks=1000)))
    for _ in range(8):
        run.call("read", READ)
        run.result("read", READ, VETO)
    assert one(run.call("read", READ)).detector == "global_circuit_breaker"


def test_abort_after_one_block():
    got = repeat(Run(on(**SMALL, abortAfterBlocks=1)), 6, "read", READ)
    assert got[6] == ("abort", "generic_repeat", 5)


def test_blocks_accumulate_across_detectors():
    run = Run(on(**SMALL))
    repeat(run, 6, "read", READ)  # one generic block
    repeat(run, 6, "process", POLL, lambda i: poll_result())  # one poll block
    got = alternate(run, 6, a=("list", {"d": 1}), b=("stat", {"f": 1}))
    assert got[6] == ("abort", "ping_pong", 5)
    assert [d.action for d in run.decisions if d.action is not Action.WARN] == [
        Action.BLOCK,
        Action.BLOCK,
        Action.ABORT,
    ]


def test_ping_pong_veto_keeps_it_stable():
    run = Run(on(**SMALL))
    got = alternate(run, 8)
    assert got[6][0] == "block" and got[7][0] == "block"
    assert got[8] == ("abort", "global_circuit_breaker", 7)


# -- after abort / end -------------------------------------------------------------------


def test_after_abort_every_call_gets_run_aborted():
    run = Run(on(**SMALL, abortAfterBlocks=1))
    repeat(run, 6, "read", READ)
    assert run.decisions[-1].action is Action.ABORT
    for tool in ("read", "write", "exec"):
        d = one(run.call(tool, {"x": 1}))
        assert (d.action, d.detector, d.error_code) == (Action.ABORT, "run_aborted", "run_aborted")
        assert d.tool_name == tool
        assert run.result(tool, {"x": 1}, text_result("late")) == []
    assert run.compaction() == []
    assert run.end() == []
    assert one(run.call("read", READ)).detector == "run_aborted"


def test_after_run_end_nothing_is_decided():
    run = Run(on(**SMALL))
    repeat(run, 3, "read", READ)
    run.end()
    assert repeat(run, 10, "read", READ) == {}
    assert run.lg.runs[run.run_id].stats.late == 20


# -- run isolation -----------------------------------------------------------------------


def test_interleaved_runs_never_share_counts():
    lg = on()
    one_run, two_run = Run(lg, run_id="r1"), Run(lg, run_id="r2")
    for _ in range(12):
        one_run.cycle("read", READ, text_result("same"))
        two_run.cycle("read", READ, text_result("same"))
    for run in (one_run, two_run):
        assert [(d.run_id, d.count) for d in run.decisions] == [(run.run_id, 10), (run.run_id, 11)]


def test_new_run_starts_from_zero():
    lg = on()
    for cycle in range(5):  # heartbeat cycles: each its own run, 9 identical calls each
        run = Run(lg, run_id=f"heartbeat-{cycle}", agent_id="same-agent")
        assert repeat(run, 9, "read", READ) == {}
        run.end()


def test_a_blocked_run_does_not_block_the_next_run():
    lg = on(**SMALL, abortAfterBlocks=1)
    first = Run(lg, run_id="a")
    repeat(first, 7, "read", READ)
    assert first.decisions[-1].detector == "run_aborted"
    assert repeat(Run(lg, run_id="b"), 3, "read", READ) == {}


# -- history window ----------------------------------------------------------------------


def test_history_size_trims_old_repeats():
    run = Run(on(historySize=5, warningThreshold=3, criticalThreshold=4))
    repeat(run, 3, "read", READ)
    for i in range(5):  # push the three reads out of the 5-call window
        run.cycle("other", {"i": i}, text_result("x"))
    assert run.cycle("read", READ, text_result("same")) == []
    # without the filler the fourth read would warn
    run2 = Run(on(historySize=5, warningThreshold=3, criticalThreshold=4), run_id="r2")
    assert repeat(run2, 4, "read", READ) == {4: ("warn", "generic_repeat", 3)}


def test_history_smaller_than_critical_can_never_block():
    run = Run(on(historySize=3, warningThreshold=2, criticalThreshold=5))
    got = repeat(run, 40, "read", READ)
    assert {v[0] for v in got.values()} == {"warn"}
    assert max(v[2] for v in got.values()) == 3


def test_history_window_caps_ping_pong_count():
    got = alternate(Run(on(historySize=6, warningThreshold=3, criticalThreshold=50)), 20)
    assert max(v[2] for v in got.values()) == 6  # the 6 calls in the window, like generic


# -- parallel calls, results out of order ------------------------------------------------


def parallel_turns(order, turns=10, same_args=False, distinct=False):
    run = Run(on(**dict(SMALL, abortAfterBlocks=99)))
    seen = []
    for t in range(turns):
        args = [{"path": "x"} if same_args else {"path": f"f{i}"} for i in range(3)]
        ids = [f"t{t}-c{i}" for i in range(3)]
        for i in range(3):
            seen.append(
                [(d.action, d.detector, d.count) for d in run.call("read", args[i], ids[i])]
            )
        for i in order:
            result = text_result(f"r{i}" if distinct else "same")
            run.result("read", args[i], result, call_id=ids[i])
    return seen


@pytest.mark.parametrize("same_args", [False, True])
@pytest.mark.parametrize("distinct", [False, True])
def test_results_out_of_order_with_call_ids(same_args, distinct):
    in_order = parallel_turns([0, 1, 2], same_args=same_args, distinct=distinct)
    assert parallel_turns([2, 1, 0], same_args=same_args, distinct=distinct) == in_order
    assert parallel_turns([1, 2, 0], same_args=same_args, distinct=distinct) == in_order


def test_parallel_identical_calls_with_identical_results_block():
    seen = parallel_turns([2, 0, 1], same_args=True)
    flat = [s for turn in seen for s in turn]
    assert (Action.BLOCK, "generic_repeat", 6) in flat
    assert (Action.ABORT, "global_circuit_breaker", 9) in flat


def test_result_without_call_id_attaches_to_newest_pending():
    run = Run(on())
    run.call("read", READ)
    run.call("read", READ)
    run.result("read", READ, text_result("first result"))
    records = run.lg.runs[run.run_id].history.records
    assert [r.pending for r in records] == [True, False]


def test_result_with_unknown_call_id_is_its_own_record():
    run = Run(on())
    run.call("read", READ, call_id="c1")
    run.result("read", READ, text_result("x"), call_id="c-unknown")
    records = run.lg.runs[run.run_id].history.records
    assert [(r.tool_call_id, r.pending) for r in records] == [("c1", True), ("c-unknown", False)]


def test_result_for_a_trimmed_call_is_its_own_record():
    run = Run(on(historySize=2))
    run.call("read", READ, call_id="old")
    run.call("a", {}, call_id="a")
    run.call("b", {}, call_id="b")
    run.result("read", READ, text_result("x"), call_id="old")
    records = run.lg.runs[run.run_id].history.records
    assert [r.tool_call_id for r in records] == ["b", "old"]


# -- decision contents -------------------------------------------------------------------


def test_decision_fields():
    run = Run(on(**SMALL), run_id="run-x", agent_id="agent-x", gateway_id="gw-x")
    repeat(run, 6, "read", READ)
    warn, _, block = run.decisions
    sig = args_hash("read", READ)
    for d, seq in ((warn, 7), (block, 11)):
        assert (d.run_id, d.agent_id, d.gateway_id, d.seq) == ("run-x", "agent-x", "gw-x", seq)
        assert d.tool_name == "read" and d.args_hash == sig
        assert d.event_time == run.start_time + 1000 * seq
        assert d.config_version == run.lg.config_for("agent-x").version
    assert (warn.severity, warn.result_hash, warn.extra) == ("warning", "", {})
    assert warn.reason.startswith("WARNING") and "3 times" in warn.reason
    assert (block.severity, block.extra, block.error_code) == ("critical", {"blocks": "1"}, "")
    assert block.result_hash == run.lg.runs["run-x"].history.records[0].result_hash
    assert block.reason.startswith("CRITICAL") and "5 times" in block.reason
    assert len({d.decision_id for d in run.decisions}) == 3
    assert all(d.decision_id.startswith("run-x:") for d in run.decisions)


def test_summary_helper():
    run = Run(on(**SMALL))
    repeat(run, 4, "read", READ)
    assert summary(run.decisions) == [("warn", "generic_repeat", 3)]
