"""What loops cost (issue 28): a run adds up the usage its events report, in total and from its
first loop decision on, and estimates what stopping it saved (streams.core.usage's method)."""

from __future__ import annotations

from dataclasses import replace

from core_helpers import Run, loop_guard, text_result

from streams.core.events import Action, RunEnded, ToolCall, event_from_dict, event_to_dict
from streams.core.usage import SAVINGS_HORIZON_MS, RunUsage

IN, OUT, COST = 1_000, 100, 0.01  # one model turn


def with_usage(event: ToolCall | RunEnded) -> ToolCall | RunEnded:
    return replace(event, input_tokens=IN, output_tokens=OUT, cost_usd=COST)


def looping_run(**config: object) -> Run:
    lg = loop_guard(enabled=True, **config)
    run = Run(lg, time_step=1_000)  # one event a second
    run.start()
    return run


def cycle(run: Run, args: dict[str, object] | None = None) -> list:
    decided = run.feed(with_usage(run.make_call("exec", args or {"cmd": "ls"})))
    decided += run.feed(run.make_result("exec", args or {"cmd": "ls"}, text_result("same")))
    return decided


def test_a_run_adds_up_its_turns_and_what_it_spent_looping() -> None:
    run = looping_run(warningThreshold=3, criticalThreshold=20, globalCircuitBreakerThreshold=30)
    first_warning = None
    for i in range(8):
        decided = cycle(run)
        if decided and first_warning is None:
            first_warning = i
    assert first_warning is not None
    usage = run.lg.runs[run.run_id].usage
    assert (usage.input_tokens, usage.output_tokens, usage.calls) == (8 * IN, 8 * OUT, 8)
    assert abs(usage.cost_usd - 8 * COST) < 1e-9
    # The turn that drew the warning was spent before the loop was seen: not counted.
    looping_calls = 8 - first_warning - 1
    assert usage.loop_calls == looping_calls
    assert usage.loop_tokens == looping_calls * (IN + OUT)
    assert usage.saved_tokens == 0  # warned only: nothing stopped it


def test_an_abort_saves_the_calls_the_loop_would_have_made_before_the_horizon() -> None:
    run = looping_run(warningThreshold=2, criticalThreshold=3, globalCircuitBreakerThreshold=4)
    decisions = []
    while not any(d.action is Action.ABORT for d in decisions):
        decisions += cycle(run)
        assert len(run.events) < 100
    usage = run.lg.runs[run.run_id].usage
    abort_time = run.events[-2].envelope.event_time  # the call that drew the abort
    elapsed = abort_time - usage.started_at
    calls_not_made = usage.calls * (SAVINGS_HORIZON_MS - elapsed) / elapsed
    assert usage.stopped
    assert usage.saved_tokens == round(usage.tokens / usage.calls * calls_not_made)
    assert usage.saved_tokens > 100 * usage.tokens  # an hour at a call every two seconds
    # Taken once: the late events of the aborted run change nothing.
    before = usage.saved_tokens
    cycle(run)
    run.feed(run.make_end("aborted"))
    assert usage.saved_tokens == before


def test_a_block_counts_as_a_stop_when_the_run_then_ends() -> None:
    run = looping_run(warningThreshold=2, criticalThreshold=3, globalCircuitBreakerThreshold=50)
    while not any(d.action is Action.BLOCK for d in run.decisions):
        cycle(run)
    usage = run.lg.runs[run.run_id].usage
    assert usage.blocked and usage.saved_tokens == 0
    run.feed(with_usage(run.make_end()))
    assert usage.saved_tokens > 0


def test_observe_mode_saves_nothing() -> None:
    run = looping_run(
        warningThreshold=2, criticalThreshold=3, globalCircuitBreakerThreshold=4, mode="observe"
    )
    for _ in range(8):
        cycle(run)
    run.feed(run.make_end())
    usage = run.lg.runs[run.run_id].usage
    assert run.decisions and not any(d.enforced for d in run.decisions)
    assert usage.loop_tokens > 0 and usage.saved_tokens == 0


def test_a_run_past_the_horizon_saved_nothing() -> None:
    usage = RunUsage(input_tokens=10, calls=1, loop_seq=2, started_at=0)
    assert usage.stop(SAVINGS_HORIZON_MS + 1) == 0 and usage.stopped


def test_bad_usage_values_count_nothing() -> None:
    run = looping_run()
    run.feed(
        replace(run.make_call("exec"), input_tokens=-5, output_tokens=None, cost_usd=float("nan"))
    )
    usage = run.lg.runs[run.run_id].usage
    assert (usage.tokens, usage.cost_usd, usage.calls) == (0, 0.0, 1)


def test_usage_fields_stay_out_of_the_flat_form_while_unset() -> None:
    run = Run()
    plain = run.make_call("exec", {"cmd": "ls"})
    assert "input_tokens" not in event_to_dict(plain)
    rich = with_usage(plain)
    flat = event_to_dict(rich)
    assert (flat["input_tokens"], flat["output_tokens"], flat["cost_usd"]) == (IN, OUT, COST)
    assert event_from_dict(flat) == rich


def test_usage_survives_the_state_round_trip_and_stays_out_when_none() -> None:
    run = looping_run(warningThreshold=2, criticalThreshold=3, globalCircuitBreakerThreshold=4)
    for _ in range(6):
        cycle(run)
    state = run.lg.runs[run.run_id]
    data = state.to_dict()
    assert data["usage"] == state.usage.to_list()
    restored = type(state).from_dict(data)
    assert restored.usage == state.usage
    quiet = Run(loop_guard(enabled=True))
    quiet.cycle("exec", {"cmd": "ls"}, text_result("x"))
    assert "usage" not in quiet.lg.runs[quiet.run_id].to_dict()
