"""What loops cost (issue 28): a run adds up the usage its events report, in total and from its
first loop decision on, and estimates what stopping it saved by streams.core.usage's bounded
method (issue 41): as many calls again as it made at most, at its pace, until the horizon."""

from __future__ import annotations

from dataclasses import replace

from core_helpers import Run, loop_guard, text_result
from hypothesis import given
from hypothesis import strategies as st

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


def test_an_abort_saves_as_many_calls_again_as_the_run_made() -> None:
    run = looping_run(warningThreshold=2, criticalThreshold=3, globalCircuitBreakerThreshold=4)
    decisions = []
    while not any(d.action is Action.ABORT for d in decisions):
        decisions += cycle(run)
        assert len(run.events) < 100
    usage = run.lg.runs[run.run_id].usage
    # A call every two seconds: its pace would fill the hour many times over, so the run's
    # own length is the bound: the calls it made, each at its average turn.
    assert usage.stopped
    assert usage.saved_tokens == usage.calls * (IN + OUT) == usage.tokens
    # Taken once: the late events of the aborted run change nothing.
    before = usage.saved_tokens
    cycle(run)
    run.feed(run.make_end("aborted"))
    assert usage.saved_tokens == before


def stopped_after(calls: int, every_ms: int, per_call: int) -> RunUsage:
    """A looping run of ``calls`` calls, one every ``every_ms``, stopped at its last call."""
    usage, start = RunUsage(), 1_700_000_000_000
    for n in range(calls):
        usage.add(start + n * every_ms, True, per_call, 0, 0.0)
        if n == 1:
            usage.decided(n + 1, enforced_block=False)
    usage.stop(start + (calls - 1) * every_ms)
    return usage


def test_a_demo_like_run_gets_a_small_plausible_estimate() -> None:
    # The demo's polling run: 23 calls of about 12.7k tokens in under a second. The hour at
    # that pace was 1,005,958,800 tokens (issue 41); as long again is what it spent.
    usage = stopped_after(23, every_ms=30, per_call=12_678)
    assert usage.saved_tokens == 23 * 12_678 == usage.tokens
    assert usage.saved_tokens < 300_000


def test_a_long_slow_run_is_capped_by_the_horizon() -> None:
    # 200 calls, one every 15 s: 49m45s in, 10m15s of the hour left at 200 calls / 2985 s.
    usage = stopped_after(200, every_ms=15_000, per_call=1_000)
    elapsed = 199 * 15_000
    assert usage.saved_tokens == round(1_000 * 200 * (SAVINGS_HORIZON_MS - elapsed) / elapsed)
    assert 0 < usage.saved_tokens < usage.tokens


def test_a_slow_short_run_is_capped_by_its_own_length() -> None:
    # 30 calls, one every 10 s: its pace would make ~340 more before the hour; 30 at most.
    usage = stopped_after(30, every_ms=10_000, per_call=1_000)
    assert usage.saved_tokens == 30 * 1_000


def test_the_agents_own_budget_caps_the_calls_and_tokens_not_made() -> None:
    # A harness that ends runs at 30 calls: the demo-like run stopped at its 23rd call would
    # have made 7 more, not 23 (OpenHands' runs end at their max_iterations).
    usage = stopped_after(23, every_ms=30, per_call=1_000)
    fresh = RunUsage.from_list(usage.to_list())
    fresh.stopped, fresh.saved_tokens = False, 0
    assert fresh.stop(1_700_000_000_000 + 22 * 30, budget_calls=30) == 7 * 1_000
    again = RunUsage.from_list(usage.to_list())
    again.stopped, again.saved_tokens = False, 0
    assert again.stop(1_700_000_000_000 + 22 * 30, budget_tokens=25_000) == 2_000  # tokens
    spent = RunUsage.from_list(usage.to_list())
    spent.stopped, spent.saved_tokens = False, 0
    assert spent.stop(1_700_000_000_000 + 22 * 30, budget_calls=20) == 0  # already past it


def test_a_configured_budget_reaches_the_estimate_of_a_looping_run() -> None:
    thresholds = {"warningThreshold": 2, "criticalThreshold": 3, "globalCircuitBreakerThreshold": 4}
    saved = {}
    for budget in (None, 7):
        run = looping_run(**thresholds, **({"runBudget": {"calls": budget}} if budget else {}))
        while not any(d.action is Action.ABORT for d in run.decisions):
            cycle(run)
        usage = run.lg.runs[run.run_id].usage
        assert usage.stopped and usage.calls == 5  # aborted at its 5th call
        saved[budget] = usage.saved_tokens
    assert saved[None] == 5 * (IN + OUT)  # as many again
    assert saved[7] == 2 * (IN + OUT)  # the harness would have ended it 2 calls later


@given(
    calls=st.integers(min_value=1, max_value=100_000),
    tokens=st.integers(min_value=0, max_value=10**10),
    started=st.integers(min_value=1, max_value=2 * 10**12),
    elapsed=st.integers(min_value=0, max_value=3 * SAVINGS_HORIZON_MS),
    budget_calls=st.integers(min_value=0, max_value=200_000),
    budget_tokens=st.integers(min_value=0, max_value=2 * 10**10),
)
def test_an_estimate_never_exceeds_its_bounds(
    calls: int, tokens: int, started: int, elapsed: int, budget_calls: int, budget_tokens: int
) -> None:
    usage = RunUsage(input_tokens=tokens, calls=calls, loop_seq=1, started_at=started)
    saved = usage.stop(started + elapsed, budget_calls, budget_tokens)
    assert saved == usage.saved_tokens >= 0
    assert saved <= tokens  # never above what the run had spent when it was stopped
    left = max(0, SAVINGS_HORIZON_MS - elapsed)
    at_pace = tokens * left / max(1_000, elapsed)  # its pace, until the horizon
    assert saved <= round(at_pace)
    if elapsed >= SAVINGS_HORIZON_MS:
        assert saved == 0
    if budget_calls:  # never past the agent's own budget
        assert saved <= round(tokens / calls * max(0, budget_calls - calls))
    if budget_tokens:
        assert saved <= max(0, budget_tokens - tokens)


def test_an_older_workers_estimate_is_capped_at_the_runs_tokens_on_load() -> None:
    old = RunUsage(input_tokens=290_000, output_tokens=1_600, calls=23, loop_seq=22)
    old.saved_tokens, old.stopped = 1_005_958_800, True
    assert RunUsage.from_list(old.to_list()).saved_tokens == 291_600


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
