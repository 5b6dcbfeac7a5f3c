"""The rules that see progress (issue 38): ``unchanged_outcome`` and ``repeated_cycle``.

The stuck shape real agent runs show most: edit the code, re-run the same command, get
byte-identical output, again and again. Each round holds other calls, so the reference's
window streaks never reach a block; these rules count the whole run.
"""

from __future__ import annotations

from core_helpers import Run, exec_result, loop_guard, summary, text_result

from streams.core.engine import LoopGuard
from streams.core.outcome_memory import MAX_SIGNATURES, OutcomeMemory
from streams.core.progress import describe_call
from streams.core.run_state import RunState

RUN = {"command": "python3 reproduce.py"}
SAME = exec_result("Traceback: AssertionError", exit_code=1)


def on(**block):
    return loop_guard(enabled=True, **block)


def edit(run: Run, n: int, result=None):
    return run.cycle(
        "edit",
        {"path": "a.py", "oldText": f"x{n}", "newText": f"x{n + 1}"},
        result or text_result(f"edited {n}"),
    )


def edit_and_rerun(run: Run, rounds: int, output=SAME):
    for n in range(rounds):
        edit(run, n)
        run.cycle("exec", RUN, output)


def rule_hits(run: Run, detector: str = "unchanged_outcome"):
    return [(action, count) for action, name, count in summary(run.decisions) if name == detector]


def test_edit_rerun_with_identical_output_warns_then_blocks_then_aborts():
    run = Run(on())
    edit_and_rerun(run, 12)
    # counts are earlier identical outcomes: warned at the 6th run, blocked at the 9th,
    # aborted after the default three blocks
    assert rule_hits(run) == [
        ("warn", 5),
        ("warn", 6),
        ("warn", 7),
        ("block", 8),
        ("block", 8),
        ("abort", 8),
    ]
    block = next(d for d in run.decisions if d.action.value == "block")
    assert "exec `python3 reproduce.py` returned the same result 8 times since call 2" in (
        block.reason
    )
    assert "with 8 edits between" in block.reason


def test_the_window_streaks_alone_only_warn_on_that_loop():
    run = Run(on(detectors={"unchangedOutcome": False}))
    edit_and_rerun(run, 12)
    assert {action for action, _, _ in summary(run.decisions)} <= {"warn"}


def test_a_different_output_after_an_edit_is_progress():
    run = Run(on())
    for n in range(20):
        edit(run, n)
        run.cycle("exec", RUN, exec_result(f"3 failed, {n} passed", exit_code=1))
    assert rule_hits(run) == []


def test_a_changed_output_restarts_the_count():
    run = Run(on())
    edit_and_rerun(run, 7)
    edit_and_rerun(run, 7, exec_result("another error", exit_code=1))
    assert {action for action, _ in rule_hits(run)} == {"warn"}


def test_commands_that_print_nothing_never_count():
    run = Run(on())
    for n in range(20):
        run.cycle("write", {"path": "repro.py", "content": f"print({n})"}, text_result("ok"))
        run.cycle("exec", {"command": "python3 repro.py"}, exec_result(str(n)))
        run.cycle("exec", {"command": "rm repro.py"}, exec_result(""))
    assert rule_hits(run) == []
    assert rule_hits(run, "repeated_cycle") == []


def test_back_to_back_repeats_stay_generic_repeats_case():
    run = Run(on())
    for _ in range(12):
        run.cycle("exec", RUN, SAME)
    assert rule_hits(run) == []  # generic repeat warns at 10 and blocks at 20, as before


def test_a_ping_pong_stays_ping_pongs_case():
    run = Run(on())
    for n in range(12):
        run.cycle("exec", RUN, SAME)
        run.cycle("process", {"action": "poll"}, exec_result(f"line {n}"))  # progress
    assert rule_hits(run) == []
    assert "ping_pong" in {name for _, name, _ in summary(run.decisions)}


def test_a_repeat_more_than_a_window_after_the_last_starts_again():
    run = Run(on(historySize=10))
    for n in range(12):
        run.cycle("exec", {"command": "git status"}, exec_result("clean"))
        for k in range(10):  # a long stretch of other work between two identical checks
            run.cycle("read", {"path": f"f{n}-{k}.py"}, text_result(f"{n}-{k}"))
    assert rule_hits(run) == []


def test_a_mostly_repeated_run_with_other_calls_between_is_caught_beyond_the_window():
    # four calls a round: the window of 30 holds fewer than eight runs of the command
    run = Run(on())
    for n in range(10):
        edit(run, n)
        run.cycle("read", {"path": "a.py"}, text_result(f"content {n}"))
        edit(run, 100 + n)
        run.cycle("exec", RUN, SAME)
    assert ("block", 8) in rule_hits(run)


def test_observe_mode_decides_alike_without_enforcing():
    run = Run(on(mode="observe"))
    edit_and_rerun(run, 10)
    blocks = [d for d in run.decisions if d.detector == "unchanged_outcome" and d.count >= 8]
    assert blocks and not any(d.enforced for d in blocks)


def test_the_rule_is_off_in_compat_mode_unless_switched_on():
    run = Run(on(compat="openclaw"))
    edit_and_rerun(run, 12)
    assert rule_hits(run) == []
    run = Run(on(compat="openclaw", detectors={"unchangedOutcome": True}))
    edit_and_rerun(run, 12)
    assert ("block", 8) in rule_hits(run)


def test_a_tool_can_be_exempt():
    run = Run(on(perTool={"exec": {"exempt": ["unchangedOutcome"]}}))
    edit_and_rerun(run, 12)
    assert rule_hits(run) == []


def test_thresholds_are_configurable_and_raised_in_order():
    run = Run(on(unchangedOutcome={"warningThreshold": 3, "criticalThreshold": 2}))
    edit_and_rerun(run, 6)
    assert rule_hits(run)[:2] == [("warn", 3), ("block", 4)]  # critical raised to 4


def test_the_memory_survives_the_state_round_trip():
    lg = on()
    run = Run(lg)
    edit_and_rerun(run, 6)
    state = lg.runs["run-1"]
    restored = RunState.from_dict(state.to_dict())
    assert restored.outcomes.to_list() == state.outcomes.to_list()
    assert restored.to_dict() == state.to_dict()
    fresh = LoopGuard(lg.fleet)
    fresh.runs["run-1"] = restored
    again = Run(fresh, start_seq=run.seq + 1)
    edit_and_rerun(again, 3)
    assert ("block", 8) in rule_hits(again)


def test_a_state_without_the_memory_reads_as_before():
    lg = on()
    run = Run(lg)
    run.cycle("read", {"path": "a"}, text_result("x"))
    data = lg.runs["run-1"].to_dict()
    data.pop("outcomes", None)
    assert RunState.from_dict(data).outcomes.streaks == {}


def test_session_scope_carries_the_streaks_to_the_next_run():
    lg = on(scope="session")
    first = Run(lg, run_id="r1", session_id="s1")
    edit_and_rerun(first, 7)
    second = Run(lg, run_id="r2", session_id="s1")
    edit_and_rerun(second, 2)
    assert ("block", 8) in rule_hits(second)


def test_the_memory_is_bounded():
    memory = OutcomeMemory()
    for n in range(MAX_SIGNATURES + 50):
        memory.begin(f"exec:{n}", "h", n, n + 1, 0)
    assert len(memory.streaks) == MAX_SIGNATURES
    assert memory.get("exec:0") is None and memory.get(f"exec:{MAX_SIGNATURES + 49}")
    top = MAX_SIGNATURES + 50
    memory.drop_stale(top + 10, 30)  # kept: a last repeat (n + 1) at least top - 20
    assert list(memory.streaks) == [f"exec:{n}" for n in range(top - 21, top)]


def test_ordinary_work_keeps_no_streak_in_the_state():
    """Only streaks of two or more are kept: the changelog carries nothing more for runs
    whose calls all differ."""
    lg = on()
    run = Run(lg)
    for n in range(40):
        run.cycle("read", {"path": f"f{n}.py"}, text_result(f"content {n}"))
        edit(run, n)
    state = lg.runs["run-1"]
    assert state.outcomes.streaks == {}
    assert "outcomes" in state.to_dict()  # the edit count only


# -- repeated_cycle ----------------------------------------------------------------------


def stuck_round(run: Run):
    """A failing edit, ``rm``, create, the same failing run: the issue's four-call cycle."""
    run.cycle("edit", {"path": "a.py", "oldText": "x", "newText": "y"}, None, "oldText not found")
    run.cycle("exec", {"command": "rm test.py"}, exec_result("rm: cannot remove", exit_code=1))
    run.cycle("write", {"path": "test.py", "content": "import a"}, text_result("written"))
    run.cycle("exec", {"command": "python3 test.py"}, SAME)


def test_a_four_call_cycle_is_warned_then_blocked():
    run = Run(on())
    for _ in range(6):
        stuck_round(run)
    hits = rule_hits(run, "repeated_cycle")
    assert hits[0] == ("warn", 3)
    # warned through round 4; in round 5 the failing edit's own error_repeat blocks first,
    # then the cycle blocks the next call and aborts (the run's third block)
    assert hits[:4] == [("warn", 3)] * 4
    assert hits[4:] == [("block", 4), ("abort", 4)]
    first_block = next(d for d in run.decisions if d.detector == "repeated_cycle")
    assert "the same 4 calls (edit, exec, write, exec) have repeated 3 times" in (
        first_block.reason
    )


def test_a_cycle_whose_outputs_change_is_progress():
    run = Run(on())
    for n in range(8):
        run.cycle("write", {"path": "t.py", "content": "x"}, text_result("written"))
        run.cycle("exec", {"command": "pytest"}, exec_result(f"{n} passed"))
        run.cycle("read", {"path": "log"}, text_result("same"))
    assert rule_hits(run, "repeated_cycle") == []


def test_a_three_call_cycle_is_caught_and_compat_keeps_it_off():
    def three(run: Run):
        run.cycle("read", {"path": "a.py"}, text_result("same"))
        run.cycle("edit", {"path": "a.py", "oldText": "a", "newText": "b"}, text_result("b"))
        run.cycle("exec", {"command": "make"}, exec_result("error 2", exit_code=2))

    run = Run(on())
    for _ in range(6):
        three(run)
    assert ("block", 4) in rule_hits(run, "repeated_cycle")
    run = Run(on(compat="openclaw"))
    for _ in range(6):
        three(run)
    assert rule_hits(run, "repeated_cycle") == []
    run = Run(on(compat="openclaw", detectors={"repeatedCycle": True}))
    for _ in range(6):
        three(run)
    assert ("block", 4) in rule_hits(run, "repeated_cycle")


def test_a_reason_quotes_the_command_and_survives_hostile_args():
    assert describe_call("exec", '{"command": "python3   reproduce.py"}') == (
        "exec `python3 reproduce.py`"
    )
    assert describe_call("exec", "[" * 100_000 + "]" * 100_000) == "exec"  # no RecursionError
    assert describe_call("read", None) == "read"
