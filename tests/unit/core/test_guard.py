"""The post-compaction guard: armed right after every compaction retry, aborts the run when the
same (tool, args, result) triple fills its window; only outcomes with a result hash count."""

from __future__ import annotations

import logging

import pytest
from core_helpers import Run, dumps, exec_result, guard, loop_guard, one, summary, text_result
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.events import Action, ToolResult
from streams.core.guard import PostCompactionGuard
from streams.core.hashing import args_hash

ARGS = {"path": "/var/log/app.log"}
ALL_OFF = {"genericRepeat": False, "knownPollNoProgress": False, "pingPong": False}


def guard_decisions(run):
    return [d for d in run.decisions if d.detector == "post_compaction_guard"]


def results(run, outcomes, tool="read", args=ARGS):
    """One call+result per outcome; returns the index (0-based) of the aborting result."""
    for i, outcome in enumerate(outcomes):
        run.plain_cycle(tool, args, text_result(outcome))
        if run.last_result_decisions:
            return i
    return None


def armed(run):
    return run.lg.runs[run.run_id].guard.armed


# -- arming ------------------------------------------------------------------------------


def test_default_guard_aborts_three_identical_triples():
    run = Run(guard())
    run.compaction()
    assert results(run, ["same"] * 3) == 2
    d = one(guard_decisions(run))
    assert d.action is Action.ABORT
    assert d.error_code == "compaction_loop_persisted"
    assert d.severity == "critical"
    assert (d.tool_name, d.count) == ("read", 3)
    assert "read" in d.reason and "3 times" in d.reason
    assert "compaction_loop_persisted" in d.reason
    assert d.args_hash == args_hash("read", ARGS)
    assert d.result_hash == run.lg.runs[run.run_id].history.records[-1].result_hash
    assert d.seq == run.seq  # decided on the result that completed the window


def test_nothing_arms_without_a_compaction():
    run = Run(guard())
    assert results(run, ["same"] * 50) is None
    assert guard_decisions(run) == []


@pytest.mark.parametrize(
    "trigger", ["timeout", "continuation", "manual", "threshold", "", "Context_Overflow"]
)
def test_every_compaction_retry_arms(trigger):
    # The reference arms after overflow auto-compaction, timeout compaction and the
    # compaction-continuation retry alike: a timeout compaction then 3 identical reads aborts.
    run = Run(guard())
    run.compaction(trigger)
    assert armed(run)
    assert results(run, ["same"] * 3) == 2
    assert one(guard_decisions(run)).error_code == "compaction_loop_persisted"


def test_only_outcomes_with_a_result_hash_spend_the_window():
    # compaction, one read with no result, then 3 identical reads: the reference aborts
    run = Run(guard())
    run.compaction()
    run.call("read", ARGS)
    run.result("read", ARGS)  # neither a result nor an error: nothing to compare
    assert armed(run) and run.lg.runs[run.run_id].guard.remaining == 3
    assert results(run, ["same"] * 3) == 2
    assert one(guard_decisions(run)).count == 3


def test_a_null_result_is_an_outcome_for_the_guard():
    run = Run(guard())
    run.compaction()
    for _ in range(3):
        run.call("read", ARGS)
        run.feed(ToolResult(run.envelope(), "read", dumps(ARGS), "null"))
    assert one(guard_decisions(run)).count == 3


def test_arms_only_after_the_compaction():
    run = Run(guard())
    results(run, ["same"] * 2)  # identical triples before the compaction do not count
    run.compaction()
    assert armed(run)
    assert results(run, ["same"] * 2) is None
    assert results(run, ["same"]) == 0


def test_arming_log_line(caplog):
    caplog.set_level(logging.INFO, logger="loopguard.compaction")
    run = Run(guard())
    run.compaction()
    assert "post-compaction guard armed for 3 attempts" in caplog.text
    caplog.clear()
    run2 = Run(guard({"postCompactionGuard": {"windowSize": 7}}), run_id="r7")
    run2.compaction()
    assert "post-compaction guard armed for 7 attempts" in caplog.text
    caplog.clear()
    Run(guard(), run_id="r-timeout").compaction("timeout")
    assert "post-compaction guard armed for 3 attempts (run r-timeout)" in caplog.text


def test_no_log_when_disabled(caplog):
    caplog.set_level(logging.INFO, logger="loopguard.compaction")
    Run(guard({"enabled": False})).compaction()
    assert "armed" not in caplog.text


# -- what aborts and what does not -------------------------------------------------------


def test_changing_results_never_abort():
    run = Run(guard())
    for round_ in range(20):
        run.compaction()
        assert results(run, [f"r{round_}-{i}" for i in range(5)]) is None
    assert guard_decisions(run) == []


@pytest.mark.parametrize(
    "outcomes",
    [
        ["a", "a", "b"],
        ["a", "b", "a"],
        ["b", "a", "a"],
    ],
)
def test_window_of_three_needs_three_identical(outcomes):
    run = Run(guard())
    run.compaction()
    assert results(run, outcomes) is None
    assert not armed(run)  # the window is spent
    assert results(run, ["a"] * 5) is None  # identical triples later do not abort


def test_window_expires_after_window_size_attempts():
    run = Run(guard({"postCompactionGuard": {"windowSize": 4}}))
    run.compaction()
    assert results(run, ["x", "y", "z"]) is None
    assert armed(run)
    assert results(run, ["w"]) is None
    assert not armed(run)
    assert results(run, ["same"] * 10) is None


def test_same_result_different_args_or_tool_is_not_a_triple():
    run = Run(guard())
    run.compaction()
    for i in range(3):
        run.plain_cycle("read", {"path": f"/f{i}"}, text_result("same"))
    assert guard_decisions(run) == []
    run.compaction()
    for tool in ("read", "cat", "head"):
        run.plain_cycle(tool, ARGS, text_result("same"))
    assert guard_decisions(run) == []


def test_identical_errors_abort():
    run = Run(guard())
    run.compaction()
    for _ in range(3):
        run.plain_cycle("exec", {"command": "make"}, error="context length exceeded")
    d = one(guard_decisions(run))
    assert d.tool_name == "exec" and d.error_code == "compaction_loop_persisted"


def test_results_without_payload_neither_count_nor_spend_the_window():
    run = Run(guard())
    run.compaction()
    for _ in range(3):
        run.call("read", ARGS)
        run.result("read", ARGS)  # no result, no error: nothing to compare
    assert armed(run) and run.lg.runs[run.run_id].guard.remaining == 3
    assert guard_decisions(run) == []


@pytest.mark.parametrize(
    ("window", "identical_needed"),
    [(1, 1), (2, 2), (3, 3), (5, 5)],
)
def test_lower_window_is_stricter(window, identical_needed):
    run = Run(guard({"postCompactionGuard": {"windowSize": window}}))
    run.compaction()
    assert results(run, ["same"] * 10) == identical_needed - 1
    assert one(guard_decisions(run)).count == identical_needed


def test_window_five_tolerates_three_identical():
    run = Run(guard({"postCompactionGuard": {"windowSize": 5}}))
    run.compaction()
    assert results(run, ["same", "same", "same", "other", "other"]) is None


def test_rearming_carries_the_count_when_the_loop_goes_on():
    """The reference reset the count on every compaction, so [compaction, same call -> same
    result] x 6 never aborted (issue 17); the count now survives a re-arm."""
    run = Run(guard())
    found = []
    for _ in range(3):
        run.compaction()
        found.append(results(run, ["same"]))
    assert found == [None, None, 0]
    d = one(guard_decisions(run))
    assert (d.count, d.error_code) == (3, "compaction_loop_persisted")


def test_rearming_carries_every_triple_of_the_open_window():
    run = Run(guard({"postCompactionGuard": {"windowSize": 3}}))
    run.compaction()
    results(run, ["a", "b"])  # window still open (one attempt left)
    run.compaction()
    assert results(run, ["a", "b"]) is None  # a: 2, b: 2
    run.compaction()
    assert results(run, ["b"]) == 0  # b: 3


def test_rearming_starts_over_when_the_first_outcome_is_new():
    run = Run(guard())
    run.compaction()
    results(run, ["same"] * 2)
    run.compaction()
    assert results(run, ["other", "same", "same"]) is None  # counts dropped at "other"
    assert guard_decisions(run) == []


def test_rearming_after_the_window_is_spent_starts_over():
    run = Run(guard())
    run.compaction()
    results(run, ["same", "x", "same"])  # window of 3 spent, no triple 3 times
    run.compaction()
    assert results(run, ["same", "same"]) is None
    assert results(run, ["same"]) == 0


def test_the_guard_aborts_on_identical_results_only_not_on_masked_ones():
    """exec outputs differing only in a date line are different results: the spec's guard
    aborts on identical results only. The rolling detectors still mask the date (a stuck
    command printing the time is no progress there)."""
    run = Run(guard())
    run.compaction()
    for day in (1, 2, 3):
        output = f"2026-12-0{day} 18:00:00 build failed"
        run.plain_cycle("exec", {"command": "make"}, exec_result(output, exit_code=2))
    assert guard_decisions(run) == []
    run = Run(guard(), run_id="r2")
    run.compaction()
    for _ in range(3):
        output = "2026-12-01 18:00:00 build failed"
        run.plain_cycle("exec", {"command": "make"}, exec_result(output, exit_code=2))
    assert one(guard_decisions(run)).error_code == "compaction_loop_persisted"


def test_masked_outputs_still_count_as_no_progress_for_the_detectors():
    run = Run(loop_guard(enabled=True, warningThreshold=2, criticalThreshold=3))
    for day in range(1, 6):
        output = f"2026-12-0{day} 18:00:00 build failed"
        run.cycle("exec", {"command": "make"}, exec_result(output, exit_code=2))
    assert ("block", "generic_repeat", 3) in summary(run.decisions)


# -- compaction storms -------------------------------------------------------------------


def storm_decisions(run):
    return [d for d in run.decisions if d.detector == "compaction_storm"]


def test_back_to_back_compactions_are_a_storm():
    run = Run(guard())
    results(run, ["seen"])
    got = [summary(run.compaction()) for _ in range(4)]
    assert got == [[], [], [], [("abort", "compaction_storm", 3)]]  # 3 earlier retries
    d = one(storm_decisions(run))
    assert (d.error_code, d.severity, d.tool_name) == ("compaction_storm", "critical", "read")
    assert "4 compaction retries in a row" in d.reason
    assert one(run.call("read", ARGS)).detector == "run_aborted"


def test_repeated_outcomes_between_compactions_are_no_progress():
    run = Run(guard({"postCompactionGuard": {"windowSize": 50, "stormThreshold": 3}}))
    results(run, ["a"], args={"p": 1})
    results(run, ["b"], args={"p": 2})
    run.compaction()
    for _ in range(3):  # each interval repeats what the calls said before
        results(run, ["a"], args={"p": 1})
        results(run, ["b"], args={"p": 2})
        decided = run.compaction()
    assert summary(decided) == [("abort", "compaction_storm", 3)]


def test_progress_between_compactions_restarts_the_storm():
    run = Run(guard())
    run.compaction()
    run.compaction()
    run.compaction()  # storm of 2 earlier retries
    results(run, ["new result"], args={"p": 9})  # a call unlike before: progress
    assert [summary(run.compaction()) for _ in range(3)] == [[], [], []]
    assert summary(run.compaction()) == [("abort", "compaction_storm", 3)]


def test_a_changed_result_of_the_same_call_is_progress():
    run = Run(guard({"postCompactionGuard": {"windowSize": 50}}))
    results(run, ["v0"])
    for i in range(1, 8):
        run.compaction()
        results(run, [f"v{i}"])  # the same call, a new result each time
    assert storm_decisions(run) == []


@pytest.mark.parametrize("threshold", [1, 2, 5])
def test_storm_threshold_is_configurable(threshold):
    run = Run(guard({"postCompactionGuard": {"stormThreshold": threshold}}))
    got = [bool(run.compaction()) for _ in range(threshold + 1)]
    assert got == [False] * threshold + [True]


def test_no_storm_when_enabled_false():
    run = Run(guard({"enabled": False}))
    assert all(run.compaction() == [] for _ in range(10))


def test_storm_state_round_trips_and_old_states_load():
    g = PostCompactionGuard()
    assert "storm" not in g.to_dict()  # nothing to write before a compaction
    g.arm(3)
    g.compaction()
    g.compaction()
    copy = PostCompactionGuard.from_dict(g.to_dict())
    assert copy == g and copy.storm == 1
    old = {"remaining": 2, "window": 3, "counts": {"s\x00h": 1}}  # written before issue 17
    assert PostCompactionGuard.from_dict(old).storm == 0


def test_after_abort_the_run_stays_aborted():
    run = Run(guard())
    run.compaction()
    results(run, ["same"] * 3)
    d = one(run.call("read", ARGS))
    assert (d.action, d.detector) == (Action.ABORT, "run_aborted")
    assert run.compaction() == []
    assert run.result("read", ARGS, text_result("same")) == []


# -- switches ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "block",
    [
        {},
        {"enabled": None},
        {"enabled": True},
        {"enabled": True, "detectors": ALL_OFF},
        {"detectors": ALL_OFF},
    ],
    ids=["unset", "null", "true", "true-detectors-off", "unset-detectors-off"],
)
def test_guard_on_unless_enabled_false(block):
    run = Run(guard(block))
    run.compaction()
    assert results(run, ["same"] * 3) == 2


def test_guard_off_when_enabled_false():
    run = Run(guard({"enabled": False}))
    run.compaction()
    assert not armed(run)
    assert results(run, ["same"] * 10) is None


def test_guard_per_agent():
    lg = guard(
        {
            "tools": {"loopDetection": {}},
            "agents": {
                "list": [
                    {"id": "off", "tools": {"loopDetection": {"enabled": False}}},
                    {"id": "strict", "tools": {"loopDetection": {"postCompactionGuard": {}}}},
                    {
                        "id": "tight",
                        "tools": {"loopDetection": {"postCompactionGuard": {"windowSize": 2}}},
                    },
                ]
            },
        }
    )
    outcome = {}
    for agent in ("off", "strict", "tight", "default"):
        run = Run(lg, run_id=f"r-{agent}", agent_id=agent)
        run.compaction()
        outcome[agent] = results(run, ["same"] * 3)
    assert outcome == {"off": None, "strict": 2, "tight": 1, "default": 2}


def test_guard_with_rolling_detectors_also_on():
    # rolling detectors warn/block on their own thresholds; the guard still aborts in its window
    run = Run(loop_guard(enabled=True, warningThreshold=2, criticalThreshold=3))
    results(run, ["same"] * 2)
    run.compaction()
    assert results(run, ["same"] * 3) == 2
    assert [(d.action.value, d.detector) for d in run.decisions] == [
        ("warn", "generic_repeat"),
        ("block", "generic_repeat"),
        ("block", "generic_repeat"),
        ("abort", "post_compaction_guard"),
    ]


def test_vetoed_calls_count_as_repeats():
    lg = loop_guard(enabled=True, warningThreshold=2, criticalThreshold=3, abortAfterBlocks=99)
    run = Run(lg)
    for _ in range(3):
        run.cycle("read", ARGS, text_result("same"))
    run.compaction()
    for _ in range(3):  # each call is blocked and the gateway answers with the loop veto
        assert one(run.cycle("read", ARGS, text_result("same"))).action is Action.BLOCK
    d = one(guard_decisions(run))
    assert (d.count, d.seq) == (3, run.seq)
    assert d.result_hash == lg.runs[run.run_id].history.records[0].result_hash


# -- the guard object --------------------------------------------------------------------


def test_guard_object_round_trip():
    g = PostCompactionGuard()
    assert not g.armed
    assert g.observe("read", "sig", "h") is None
    g.arm(3, "run")
    assert g.observe("read", "sig", "h") is None
    copy = PostCompactionGuard.from_dict(g.to_dict())
    assert copy.to_dict() == g.to_dict()
    assert copy.observe("read", "sig", "h") is None
    hit = copy.observe("read", "sig", "h")
    assert hit is not None and hit.count == 3 and hit.tool_name == "read"
    assert not copy.armed


def test_a_vetoed_call_counts_in_the_window():
    # A deliberate deviation (README): the loop veto is the call's outcome, repeating its last
    # one, so blocked calls after a compaction fill the window like the loop they stop.
    run = Run(loop_guard(enabled=True, warningThreshold=2, criticalThreshold=3, abortAfterBlocks=9))
    for _ in range(4):
        run.cycle("read", ARGS, text_result("same"))
    assert run.decisions[-1].action is Action.BLOCK
    run.compaction()
    for _ in range(3):
        decided = run.cycle("read", ARGS, text_result("same"))
        assert decided[0].action is Action.BLOCK  # answered with the veto, not the tool
    d = one(guard_decisions(run))
    assert (d.action, d.count, d.error_code) == (Action.ABORT, 3, "compaction_loop_persisted")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["compaction", "repeat", "new"]), max_size=40), st.integers(1, 4))
def test_the_storm_count_is_the_retries_since_the_last_progress(ops, threshold):
    """At each compaction retry the storm count is the earlier retries after the last outcome
    that made progress; the run aborts at the first retry where it reaches the threshold."""
    window = {"windowSize": 100, "stormThreshold": threshold}  # the guard's window never fills
    run = Run(guard({"historySize": 1000, "postCompactionGuard": window}))
    results(run, ["same"])  # the call that "repeat" repeats
    since_progress = 0  # compactions after the last progress
    for step, op in enumerate(ops):
        if op == "compaction":
            decided = run.compaction()
            if since_progress >= threshold:
                assert summary(decided) == [("abort", "compaction_storm", since_progress)]
                return
            assert decided == []
            since_progress += 1
        elif op == "repeat":
            results(run, ["same"])  # the same outcome again: no progress
        else:
            results(run, [f"new {step}"], args={"step": step})  # a new call: progress
            since_progress = 0
