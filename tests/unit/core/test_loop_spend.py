"""Issue 43: the budget rule (``maxLoopTokens``) and decisions worded for the model
(``warnings: "model"``): a run follows its current loop (streams.core.loop_spend), aborts it
once its tokens while looping pass the budget, and words each decision for the model
(streams.core.model_notes); agents that set neither decide exactly as before."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_helpers import Run, loop_guard, text_result

from streams.core.config import resolve
from streams.core.config_error import ConfigError
from streams.core.events import Action, Decision, RunEnded, ToolCall
from streams.core.loop_spend import LOOP_BUDGET, LOOP_TOKENS_EXCEEDED, LoopSpend
from streams.core.loop_watch import watches_loops
from streams.core.model_notes import MODEL_NOTE, model_note, note_of

IN, OUT = 1_000, 100  # one model turn
THRESHOLDS = {
    "historySize": 100,
    "warningThreshold": 3,
    "criticalThreshold": 50,
    "globalCircuitBreakerThreshold": 60,
}


# -- config ------------------------------------------------------------------------------


def test_unset_the_version_is_the_one_configs_always_had() -> None:
    assert resolve({"warnings": "log"}).version == resolve({}).version
    assert resolve({"maxLoopTokens": None}).version == resolve({}).version
    assert resolve({}).warnings == "log" and resolve({}).max_loop_tokens == 0
    assert not watches_loops(resolve({}))


def test_set_they_are_part_of_the_version() -> None:
    base = resolve({}).version
    model = resolve({"warnings": "model"})
    budget = resolve({"maxLoopTokens": 50_000})
    assert model.version != base and budget.version != base and model.version != budget.version
    assert watches_loops(model) and watches_loops(budget)
    assert budget.max_loop_tokens == 50_000


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"warnings": "Model"}, 'tools.loopDetection.warnings: expected "log" or "model"'),
        ({"warnings": True}, 'tools.loopDetection.warnings: expected "log" or "model"'),
        ({"maxLoopTokens": 0}, "tools.loopDetection.maxLoopTokens: must be at least 1"),
        ({"maxLoopTokens": "10k"}, "tools.loopDetection.maxLoopTokens: expected a whole number"),
        ({"maxLoopTokens": True}, "tools.loopDetection.maxLoopTokens: expected a whole number"),
    ],
)
def test_bad_values_are_refused_naming_the_field(block: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        resolve(block)


# -- the current loop ----------------------------------------------------------------------


def test_a_loop_begins_at_its_first_decision_and_counts_the_turns_after_it() -> None:
    spend = LoopSpend()
    spend.observe(1, 1_000, True, 500, False, 30)
    assert not spend.looping and spend.tokens == 0
    spend.observe(2, 2_000, True, 500, True, 30)  # its own turn came before the loop was seen
    assert (spend.since_seq, spend.since_time, spend.tokens, spend.calls) == (2, 2_000, 0, 0)
    spend.observe(3, 3_000, False, 0, False, 30)  # a result: no turn, no call
    spend.observe(4, 4_000, True, 700, True, 30)
    assert (spend.since_seq, spend.tokens, spend.calls) == (2, 700, 1)
    assert spend.over(699) and not spend.over(700) and not spend.over(0)


def test_a_loop_ends_once_a_window_of_calls_drew_no_decision() -> None:
    spend = LoopSpend()
    spend.observe(1, 1_000, True, 100, True, 3)
    for seq in (2, 3):
        spend.observe(seq, seq * 1_000, True, 100, False, 3)
    assert spend.looping and spend.tokens == 200
    spend.observe(4, 4_000, True, 100, False, 3)  # the third quiet call: the loop is over
    assert not spend.looping and spend.tokens == 0
    spend.observe(5, 5_000, True, 100, True, 3)  # a new loop, with its own spend
    assert (spend.since_seq, spend.tokens) == (5, 0)


def test_the_loop_round_trips() -> None:
    spend = LoopSpend(3, 4_000, 5, 6_000, 2)
    assert LoopSpend.from_list(spend.to_list()) == spend


# -- runs ---------------------------------------------------------------------------------


def turn(run: Run, event: ToolCall | RunEnded) -> ToolCall | RunEnded:
    return replace(event, input_tokens=IN, output_tokens=OUT)


def loop_until_stopped(run: Run, most: int = 40) -> list[Decision]:
    decided: list[Decision] = []
    for _ in range(most):
        decided += run.feed(turn(run, run.make_call("read", {"path": "a.txt"})))
        if any(d.action is Action.ABORT for d in decided):
            break
        decided += run.feed(run.make_result("read", {"path": "a.txt"}, text_result("same")))
    return decided


def test_a_loop_over_its_budget_is_aborted() -> None:
    run = Run(loop_guard(enabled=True, maxLoopTokens=5_000, **THRESHOLDS), time_step=1_000)
    run.start()
    decided = loop_until_stopped(run)
    aborts = [d for d in decided if d.action is Action.ABORT]
    assert [(d.detector, d.error_code) for d in aborts] == [(LOOP_BUDGET, LOOP_TOKENS_EXCEEDED)]
    first_warning = min(d.seq for d in decided)
    abort = aborts[0]
    # warned at the 4th call; the turns after it: 1,100 tokens each, over 5,000 at the 5th
    assert abort.count == 5 * (IN + OUT) and abort.count > 5_000
    assert f"since seq {first_warning}" in abort.reason and "maxLoopTokens 5000" in abort.reason
    assert run.lg.runs[run.run_id].status == "aborted"
    assert run.lg.runs[run.run_id].usage.stopped  # the saved estimate is taken, as any abort


def test_without_a_budget_the_same_loop_only_warns() -> None:
    run = Run(loop_guard(enabled=True, **THRESHOLDS), time_step=1_000)
    run.start()
    decided = loop_until_stopped(run, most=12)
    assert decided and {d.action for d in decided} == {Action.WARN}
    assert all(MODEL_NOTE not in d.extra for d in decided)


def test_a_budget_changes_no_decision_of_a_run_that_does_not_spend_it() -> None:
    """The budget on, a loop that stays under it: the same decisions as with it off, up to
    the config version they carry."""
    runs = []
    for extra in ({}, {"maxLoopTokens": 10**9}):
        run = Run(loop_guard(enabled=True, **THRESHOLDS, **extra), time_step=1_000)
        run.start()
        runs.append([replace(d, config_version="") for d in loop_until_stopped(run, most=12)])
    assert runs[0] == runs[1] and runs[0]


def test_model_notes_say_what_repeated_since_when_and_what_to_do() -> None:
    run = Run(loop_guard(enabled=True, warnings="model", **THRESHOLDS), time_step=1_000)
    run.start()
    decided = loop_until_stopped(run, most=6)
    first, later = decided[0], decided[-1]
    assert first.detector == "generic_repeat"
    assert note_of(first).startswith(
        f"[loopguard] You have called read with the same arguments {first.count} times"
    )
    assert "first noticed at 22:13:" in note_of(first)  # the warned call's event time
    assert "going on since" in note_of(later) and "UTC" in note_of(later)
    assert "change the arguments or the approach" in note_of(later)
    assert "loopguard will refuse the call" in note_of(later)  # a warning says what comes next


def test_a_blocks_note_says_it_was_refused() -> None:
    cfg = {"warningThreshold": 2, "criticalThreshold": 4, "globalCircuitBreakerThreshold": 30}
    run = Run(loop_guard(enabled=True, warnings="model", **cfg), time_step=1_000)
    run.start()
    decided = loop_until_stopped(run, most=8)
    block = next(d for d in decided if d.action is Action.BLOCK)
    assert note_of(block).endswith("loopguard refused this call: it did not run.")
    assert "going on since" in note_of(block)


def test_the_note_is_the_wording_functions() -> None:
    decision = Decision(
        "r", "a", "g", 9, 0, Action.ABORT, "error_repeat", "critical", 4, "exec", "why"
    )
    note = model_note(decision, LoopSpend(5, 1_700_000_000_000, 2, 0, 0))
    assert note == (
        "[loopguard] You have called exec 4 times and it failed the same way each time, going "
        "on since 22:13:20 UTC. Retrying will fail the same way: read the error "
        "and fix its cause first, or stop and report the error. loopguard stopped this run: "
        "no further tool calls will run."
    )
    assert note_of(decision) == ""


def test_a_looping_runs_state_keeps_its_loop_and_others_store_nothing_new() -> None:
    from streams.core.run_state import RunState

    for block, kept in (({"maxLoopTokens": 50_000}, True), ({}, False)):
        run = Run(loop_guard(enabled=True, **THRESHOLDS, **block), time_step=1_000)
        run.start()
        loop_until_stopped(run, most=6)
        state = run.lg.runs[run.run_id]
        data = state.to_dict()
        assert ("loop" in data) is kept
        restored = RunState.from_dict(data)
        assert restored.loop == state.loop and restored.to_dict() == data
        if kept:
            assert restored.loop.looping and restored.loop.tokens == 2 * (IN + OUT)  # warned at 4th
