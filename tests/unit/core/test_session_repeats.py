"""Rate and failure across runs in session scope (issue 44).

Hand-written transcripts of the shapes the issue saw in published OpenClaw sessions: a
heartbeat whose one ``read`` fails with the same "tool not found" error every 30 minutes (56
runs over 13 hours), and its healthy twins: a 13-day heartbeat reading the same file once per
run (294 runs, one every ~65 minutes), an hourly cron check whose output changes, and a long
coding session with real process polls. A failing call is remembered across the session's runs
(fresh-triggered ones included); a run that begins long after its predecessor starts fresh, so
successes at a steady interval build no streak, while a compaction's new run still carries.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from core_helpers import Run, exec_result, loop_guard, poll_result, summary, text_result

from streams.core.config import ConfigError, resolve
from streams.core.engine import LoopGuard
from streams.core.events import Action, Decision
from streams.core.run_state import RunState
from streams.core.session_failures import MAX_FAILING_CALLS, FailingCalls
from streams.replay.per_rule import RULES, differing_rules, per_rule_backtest
from streams.state import state_format

MINUTE = 60_000
START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SESSION = "agent:main:main"
HEARTBEAT_READ = {"path": "HEARTBEAT.md"}
LOST = "lost"  # the run's RunStarted never reached loopguard
SESSION_BLOCK: dict[str, Any] = {"enabled": True, "scope": "session"}
# What starts a heartbeat's run as loopguard may see it: the trigger, none (OpenClaw's hook
# context did not carry one), a user turn (an import), or a lost RunStarted.
TRIGGERS = ["heartbeat", None, "user", LOST]


def one_call_run(
    lg: LoopGuard,
    index: int,
    start: int,
    trigger: str | None,
    tool: str,
    args: dict[str, Any],
    result: Any = None,
    error: str | None = None,
) -> Run:
    """One scheduled run of the session: its start, one call answered (a block with the
    gateway's veto), its end; events two seconds apart."""
    run = Run(lg, run_id=f"run-{index:03d}", session_id=SESSION, start_time=start, time_step=2_000)
    if trigger != LOST:
        run.start(trigger)
    run.cycle(tool, args, result, error, call_id=f"call-{index}")
    run.end()
    return run


def failing_heartbeat(lg: LoopGuard, trigger: str | None, runs: int = 56) -> list[Run]:
    """Every 30 minutes a heartbeat run whose one read fails: tool not found (the gateway's
    request id differs every time)."""
    return [
        one_call_run(
            lg,
            i,
            START + i * 30 * MINUTE,
            trigger,
            "read",
            HEARTBEAT_READ,
            error=f"Tool not found: read (request req_{7340 + i * 13:x}k)",
        )
        for i in range(runs)
    ]


def healthy_heartbeat(lg: LoopGuard, trigger: str | None, runs: int = 294) -> list[Run]:
    """13 days of heartbeats, one every 64 to 66 minutes, each reading the same file with the
    same content."""
    out, start = [], START
    for i in range(runs):
        content = text_result("# Heartbeat\n- check the inbox\n- reply HEARTBEAT_OK if idle")
        out.append(one_call_run(lg, i, start, trigger, "read", HEARTBEAT_READ, content))
        start += (64 + i % 3) * MINUTE
    return out


def decided(runs: list[Run]) -> list[tuple[int, list[tuple[str, str, int]]]]:
    return [(i, summary(run.decisions)) for i, run in enumerate(runs) if run.decisions]


# -- the failing heartbeat -------------------------------------------------------------------


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_a_heartbeat_failing_the_same_way_every_run_is_warned_then_blocked(trigger):
    lg = loop_guard(**SESSION_BLOCK)
    runs = failing_heartbeat(lg, trigger)
    found = decided(runs)
    assert found[:3] == [
        (3, [("warn", "error_across_runs", 3)]),  # the 4th run: 3 earlier runs failed alike
        (4, [("warn", "error_across_runs", 4)]),
        (5, [("block", "error_across_runs", 5)]),  # stopped at its 6th call (target: 30)
    ]
    # Every later run's read is blocked: a veto is no outcome, so the count stays; each
    # run starts fresh (30 minutes after the last), so its blocks never escalate to an abort.
    assert found[3:] == [(i, [("block", "error_across_runs", 5)]) for i in range(6, 56)]
    block = runs[5].decisions[0]
    assert block.reason.startswith(
        "CRITICAL: read `HEARTBEAT.md` failed the same way in 5 runs of this session in a row "
        '("Tool not found: read (request req_1cack)")'
    )
    assert block.result_hash.startswith("error:")  # a failure: incidents sign it by its error
    assert all(len(lg.runs[run.run_id].history) <= 1 for run in runs)  # windows not carried


def test_the_failing_heartbeat_is_not_judged_across_runs_in_run_scope():
    lg = loop_guard(enabled=True)
    assert decided(failing_heartbeat(lg, "heartbeat")) == []
    assert "failing" not in lg.runs["run-055"].to_dict()


def test_what_ends_or_keeps_a_failing_streak():
    lg = loop_guard(**SESSION_BLOCK)
    error = "Tool not found: read"
    schedule: list[tuple[str, Any, str | None]] = [
        ("read", None, error),
        ("read", None, error),
        ("exec", exec_result("ok"), None),  # a run without the read leaves the count
        ("read", None, error),  # third run of the read failing alike
        ("read", text_result("# Heartbeat"), None),  # a success forgets it
        ("read", None, error),
        ("read", None, error),
        ("read", None, "EACCES: permission denied"),  # another error starts again at 1
        ("read", None, "EACCES: permission denied"),
    ]
    runs = []
    for i, (tool, result, failure) in enumerate(schedule):
        args = HEARTBEAT_READ if tool == "read" else {"command": "uptime"}
        runs.append(
            one_call_run(lg, i, START + i * 30 * MINUTE, "heartbeat", tool, args, result, failure)
        )
    # the fourth read is warned (three runs failed alike, the run without it between), then
    # succeeds: forgotten, so the next two failures count from 1 again
    assert decided(runs) == [(4, [("warn", "error_across_runs", 3)])]
    failing = lg.runs["run-008"].failing.entries
    assert [(e.runs, e.quote) for e in failing.values()] == [(2, "EACCES: permission denied")]


def test_a_run_counts_once_however_often_the_call_failed_in_it():
    lg = loop_guard(**SESSION_BLOCK, errorRepeatThreshold=10)
    for i in range(2):
        run = Run(lg, run_id=f"run-{i}", session_id=SESSION, start_time=START + i * 30 * MINUTE)
        run.start("heartbeat")
        for k in range(3):
            run.cycle("read", HEARTBEAT_READ, error="Tool not found: read", call_id=f"c{i}-{k}")
        run.end()
        assert run.decisions == []
    assert [e.runs for e in lg.runs["run-1"].failing.entries.values()] == [2]


def test_the_memory_of_failing_calls_is_bounded():
    calls = FailingCalls()
    for i in range(MAX_FAILING_CALLS + 5):
        calls.failed(f"read:{i}", "ENOENT", "run-1")
    assert len(calls.entries) == MAX_FAILING_CALLS
    assert next(iter(calls.entries)) == "read:5"  # the oldest failures went first
    calls.failed("read:5", "ENOENT", "run-2")  # failing again moves it to the newest end
    assert list(calls.entries)[-1] == "read:5" and calls.entries["read:5"].runs == 2


def test_a_tool_exempt_from_the_rule_is_not_judged_across_runs():
    lg = loop_guard(**SESSION_BLOCK, perTool={"read": {"exempt": ["errorAcrossRuns"]}})
    assert decided(failing_heartbeat(lg, "heartbeat")) == []
    lg = loop_guard(**SESSION_BLOCK, detectors={"errorAcrossRuns": False})
    assert decided(failing_heartbeat(lg, "heartbeat")) == []


def test_thresholds_are_configurable():
    lg = loop_guard(
        **SESSION_BLOCK, errorAcrossRuns={"warningThreshold": 2, "criticalThreshold": 3}
    )
    found = decided(failing_heartbeat(lg, "heartbeat", runs=5))
    assert found == [
        (2, [("warn", "error_across_runs", 2)]),
        (3, [("block", "error_across_runs", 3)]),
        (4, [("block", "error_across_runs", 3)]),
    ]


# -- the healthy heartbeat and why session scope aborted it ------------------------------------


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_a_13_day_heartbeat_reading_the_same_file_is_untouched_in_session_scope(trigger):
    lg = loop_guard(**SESSION_BLOCK)
    runs = healthy_heartbeat(lg, trigger)
    assert len(runs) == 294 and runs[-1].events[-1].envelope.event_time - START > 13 * 86_400_000
    assert decided(runs) == []


def test_why_session_scope_aborted_the_healthy_heartbeat():
    """With every run carrying its predecessor's window (``sessionGapSeconds: 0``, what session
    scope did before issue 44) a heartbeat whose RunStarted names no fresh trigger (OpenClaw's
    hook context did not carry one) adds one identical call per run to one window: a
    generic repeat across runs, warned from the 11th run, blocked at the 21st and 22nd (the
    block count carries too), and the 23rd run is aborted."""
    lg = loop_guard(**SESSION_BLOCK, sessionGapSeconds=0)
    runs = healthy_heartbeat(lg, None)
    found = decided(runs)
    assert found[0] == (10, [("warn", "generic_repeat", 10)])
    assert found[10:12] == [
        (20, [("block", "generic_repeat", 20)]),
        (21, [("block", "generic_repeat", 21)]),
    ]
    abort = runs[22].decisions[0]
    assert (abort.action, abort.error_code) == (Action.ABORT, "loop_persisted_after_block")


def test_a_compaction_s_new_run_still_carries_a_loop_and_a_late_one_does_not():
    def split_loop(gap_ms: int, **block: Any) -> list[Decision]:
        lg = loop_guard(enabled=True, warningThreshold=5, criticalThreshold=8, **block)
        a = Run(lg, run_id="A", session_id=SESSION, start_time=START)
        a.start("user")
        for i in range(5):
            a.cycle("read", {"path": "/x"}, text_result("same page"), call_id=f"a{i}")
        a.end()
        b = Run(lg, run_id="B", session_id=SESSION, start_time=a.events[-1].envelope.event_time)
        b.start_time += gap_ms
        b.start("compaction")
        for i in range(5):
            b.cycle("read", {"path": "/x"}, text_result("same page"), call_id=f"b{i}")
        return b.decisions

    carried = [("warn", "generic_repeat", n) for n in (5, 6, 7)]
    carried += [("block", "generic_repeat", n) for n in (8, 9)]
    assert summary(split_loop(40_000, scope="session")) == carried  # 40 s later: a continuation
    assert summary(split_loop(11 * MINUTE, scope="session")) == []  # after 11 minutes: fresh
    late = split_loop(11 * MINUTE, scope="session", sessionGapSeconds=3_600)
    assert summary(late) == carried


def test_a_late_run_still_takes_the_session_s_failing_calls():
    lg = loop_guard(**SESSION_BLOCK, sessionGapSeconds=60)
    runs = failing_heartbeat(lg, "user", runs=6)  # 30 minutes apart: every run starts fresh
    assert summary(runs[5].decisions) == [("block", "error_across_runs", 5)]
    assert lg.runs["run-005"].blocks == 1 and len(lg.runs["run-005"].history) == 1


def test_a_file_read_every_user_turn_builds_no_streak_but_a_loop_cut_by_compactions_goes_on():
    """A success repeated once per run (the turn's first read) is carried in the window, but
    not as an outcome streak; a loop repeated within a run and cut by compactions is."""
    lg = loop_guard(**SESSION_BLOCK)
    clock = START
    for turn in range(12):
        run = Run(lg, run_id=f"turn-{turn}", session_id=SESSION, start_time=clock)
        run.start("user")
        run.cycle("read", {"path": "AGENTS.md"}, text_result("# Agents\nbuild with npm"))
        for k in range(6):
            path = f"src/m{turn}_{k}.ts"
            run.cycle("read", {"path": path}, text_result(f"export const a = {k};"))
        run.end()
        assert run.decisions == []
        clock = run.events[-1].envelope.event_time + 3 * MINUTE
    last = lg.runs["turn-11"]
    assert last.own_from == 77 and len(last.history) == 30  # the window was carried
    assert all(streak.count <= 2 for streak in last.outcomes.streaks.values())

    lg = loop_guard(**SESSION_BLOCK)
    reruns: list[Decision] = []
    clock = START
    for name, rounds in (("A", 4), ("B", 3), ("C", 2)):
        run = Run(lg, run_id=name, session_id=SESSION, start_time=clock)
        run.start("user" if name == "A" else "compaction")
        for n in range(rounds):
            run.cycle("edit", {"path": "a.py", "oldText": f"x{n}", "newText": f"x{n + 1}"})
            reruns += run.cycle("exec", {"command": "pytest -x"}, exec_result("1 failed"))
        clock = run.events[-1].envelope.event_time + 20_000
    # as in one run: warned from the 6th rerun (B's second), blocked at the 9th (C's second)
    assert summary(reruns) == [
        *(("warn", "unchanged_outcome", n) for n in (5, 6, 7)),
        ("block", "unchanged_outcome", 8),
    ]


# -- the other healthy twins ---------------------------------------------------------------------


@pytest.mark.parametrize("trigger", ["cron", None])
def test_an_hourly_cron_check_whose_output_changes_is_never_stopped(trigger):
    """Eight days of an hourly status check: the page and the disk figures change from run to
    run; the status API timed out twice in a row once (an outage that ended)."""
    lg = loop_guard(**SESSION_BLOCK)
    decisions: list[Decision] = []
    for i in range(192):
        run = Run(
            lg,
            run_id=f"cron-{i:03d}",
            session_id="cron:status-check",
            start_time=START + i * 60 * MINUTE,
            time_step=3_000,
        )
        if trigger != LOST:
            run.start(trigger)
        fetch = {"url": "https://status.example.com/api/summary"}
        if i in (77, 78):
            run.cycle("web_fetch", fetch, error="fetch failed: ETIMEDOUT after 30000ms")
        else:
            page = f"queue depth {(i * 37) % 101}, p95 {120 + (i * 11) % 40} ms, all systems ok"
            run.cycle("web_fetch", fetch, text_result(page))
        df = exec_result(f"/dev/sda1  80G  {31 + i // 24}G  {49 - i // 24}G  {39 + i // 24}% /")
        run.cycle("exec", {"command": "df -h /"}, df)
        if i % 24 == 0:  # once a day, a report
            run.cycle("message", {"action": "send", "text": f"daily status {i // 24}"})
        run.end()
        decisions += run.decisions
    assert decisions == []


def coding_session(lg: LoopGuard) -> list[Run]:
    """13 hours of coding in one chat session: 60 runs (user turns, and compactions' new runs
    seconds after the previous one), each reading and editing files, building in the
    background and polling the build until it exits (its output grows), running the tests
    (failures change from run to run), now and then reading a file that does not exist."""
    rng = random.Random(44)
    runs: list[Run] = []
    clock = START
    for i in range(60):
        trigger = "compaction" if i and rng.random() < 0.2 else "user"
        clock += 20_000 if trigger == "compaction" else rng.choice([2, 5, 10, 20, 30, 40]) * MINUTE
        run = Run(lg, run_id=f"turn-{i:02d}", session_id=SESSION, start_time=clock)
        run.time_step = rng.randint(2_000, 6_000)
        run.start(trigger)
        run.cycle("read", {"path": "AGENTS.md"}, text_result("# Agents\nbuild with npm"))
        for k in range(rng.randint(1, 4)):
            path = f"src/module_{rng.randint(0, 30)}.ts"
            run.cycle("read", {"path": path}, text_result(f"export const v{i}_{k} = {k};"))
            run.cycle("edit", {"path": path, "oldText": f"v{k}", "newText": f"v{k + 1}"})
        if rng.random() < 0.3:
            missing = f"docs/notes-{i}.md"
            run.cycle("read", {"path": missing}, error=f"ENOENT: no such file, open '{missing}'")
        session = f"proc-{i}"
        run.cycle(
            "exec",
            {"command": "npm run build", "background": True},
            exec_result("", status="running", exit_code=None, sessionId=session),
        )
        total = rng.randint(3, 9)
        for poll in range(total):
            done = poll == total - 1
            output = "\n".join(f"compiled {n * 17} of 140 modules" for n in range(poll + 1))
            result = poll_result("completed" if done else "running", output, 0 if done else None)
            run.cycle("process", {"action": "poll", "sessionId": session}, result)
        failed = rng.randint(0, 4)
        summary_line = f"Tests: {failed} failed, {212 - failed} passed (run {i})"
        run.cycle(
            "exec", {"command": "npm test"}, exec_result(summary_line, exit_code=int(failed > 0))
        )
        run.cycle("exec", {"command": "git status --short"}, exec_result(f" M src/module_{i}.ts"))
        run.end()
        runs.append(run)
    return runs


def test_a_long_coding_session_with_real_process_polls_is_never_stopped():
    lg = loop_guard(**SESSION_BLOCK)
    runs = coding_session(lg)
    span = runs[-1].events[-1].envelope.event_time - START
    assert 12 * 3_600_000 < span < 16 * 3_600_000
    stopped = [d for run in runs for d in run.decisions if d.action is not Action.WARN]
    assert stopped == []
    assert all(d.detector != "error_across_runs" for run in runs for d in run.decisions)


# -- compat, config, state ------------------------------------------------------------------------


def test_compat_openclaw_keeps_session_scope_as_it_was():
    """Under compat the rule is off and any gap carries, as before issue 44: the failing
    heartbeat draws nothing, the healthy one is carried (and blocked) as before."""
    compat = {**SESSION_BLOCK, "compat": "openclaw"}
    assert decided(failing_heartbeat(loop_guard(**compat), "heartbeat")) == []
    runs = healthy_heartbeat(loop_guard(**compat), None, runs=40)
    # every run carries its predecessor's window, whatever the gap (65 minutes here)
    assert [len(run.lg.runs[run.run_id].history) for run in runs[:16:5]] == [1, 6, 11, 16]
    spelt_out = {**compat, "sessionGapSeconds": 0, "detectors": {"errorAcrossRuns": False}}
    assert resolve(spelt_out).version == resolve(compat).version
    as_spelt = healthy_heartbeat(loop_guard(**spelt_out), None, runs=40)
    assert [r.decisions for r in runs] == [r.decisions for r in as_spelt]
    assert any(d.action is Action.BLOCK for run in runs for d in run.decisions)
    # a block that switches the rule on under compat has it
    on = loop_guard(**compat, detectors={"errorAcrossRuns": True})
    assert decided(failing_heartbeat(on, "heartbeat", runs=6))[-1][1][0][:2] == (
        "block",
        "error_across_runs",
    )


def test_config_fields_are_validated_and_versioned_only_off_their_defaults():
    default = resolve({})
    assert (default.error_across_runs_warning, default.error_across_runs_critical) == (3, 5)
    assert default.session_gap_ms == 600_000 and default.detectors.error_across_runs
    assert resolve({"compat": "openclaw"}).session_gap_ms == 0
    assert not resolve({"compat": "openclaw"}).detectors.error_across_runs
    for spelt_out in (
        {"sessionGapSeconds": 600},
        {"errorAcrossRuns": {"warningThreshold": 3, "criticalThreshold": 5}},
        {"detectors": {"errorAcrossRuns": True}},
    ):
        assert resolve(spelt_out).version == default.version, spelt_out
    compat = resolve({"compat": "openclaw"})
    assert resolve({"compat": "openclaw", "sessionGapSeconds": 0}).version == compat.version
    assert resolve({"compat": "openclaw", "sessionGapSeconds": 600}).version != compat.version
    for changed in (
        {"sessionGapSeconds": 0},
        {"errorAcrossRuns": {"criticalThreshold": 6}},
        {"detectors": {"errorAcrossRuns": False}},
    ):
        assert resolve(changed).version != default.version, changed
    raised = resolve({"errorAcrossRuns": {"warningThreshold": 4, "criticalThreshold": 2}})
    assert raised.error_across_runs_critical == 5  # raised above the warning, like the others
    for bad, why in (
        (-1, "expected a whole number of seconds >= 0, got -1"),
        (True, "expected a whole number of seconds >= 0, got True"),
        ("600", "expected a whole number of seconds >= 0, got '600'"),
    ):
        with pytest.raises(ConfigError, match=r"^tools\.loopDetection\.sessionGapSeconds: "):
            resolve({"sessionGapSeconds": bad})
        with pytest.raises(ConfigError, match=why):
            resolve({"sessionGapSeconds": bad})
    with pytest.raises(ConfigError, match=r"errorAcrossRuns\.criticalThreshold: expected a whole"):
        resolve({"errorAcrossRuns": {"criticalThreshold": 0}})


def test_backtest_per_rule_lists_the_rule_and_what_it_changes():
    assert "detectors.errorAcrossRuns" in RULES
    events = [e for run in failing_heartbeat(loop_guard(), "heartbeat") for e in run.events]
    baseline = loop_guard(**SESSION_BLOCK).fleet
    candidate = loop_guard(**SESSION_BLOCK, detectors={"errorAcrossRuns": False}).fleet
    assert differing_rules(baseline, candidate) == {"detectors.errorAcrossRuns": ["*"]}
    result = per_rule_backtest(baseline, candidate, events)
    (rule,) = result.rules
    assert rule.rule == "detectors.errorAcrossRuns" and rule.value is False
    assert len(rule.runs) == 53 and not result.other_differences  # runs 3 to 55 no longer judged


def test_the_failing_calls_survive_the_changelog_and_old_states_load():
    lg = loop_guard(**SESSION_BLOCK)
    failing_heartbeat(lg, "heartbeat", runs=4)
    state = lg.runs["run-003"]
    data = state.to_dict()
    assert data["failing"][0][1:4] == [
        state.failing.entries[next(iter(state.failing.entries))].error_hash,
        4,
        "run-003",
    ]
    restored = state_format.decode(state_format.encode(state))
    assert restored.to_dict() == data
    assert state_format.encode(restored) == state_format.encode(state)
    old = {key: value for key, value in data.items() if key != "failing"}
    assert RunState.from_dict(old).failing.entries == {}
    # the next run, seeded from the restored state, is blocked as from the live one
    for seed in (state, restored):
        run = RunState("run-004")
        run.predecessor = seed.session_carry()
        nxt = Run(None, run_id="run-004", session_id=SESSION, start_time=START + 4 * 30 * MINUTE)
        cfg = lg.config_for("agent-1")
        run.apply(nxt.make_start("heartbeat"), cfg)
        out = run.apply(nxt.make_call("read", HEARTBEAT_READ, "c4"), cfg)
        assert summary(out) == [("warn", "error_across_runs", 4)]
