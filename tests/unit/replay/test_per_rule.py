"""``backtest --per-rule`` logic (issue 29) without a broker: which rules two configs set
otherwise, the one-rule variants, and what each rule alone changes on recorded traffic
(recorded here under compat mode, as a fleet migrating from the reference would have it)."""

from __future__ import annotations

import io
import json

from core_helpers import Run, exec_result, fleet, loop_guard, text_result

from streams.core.events import Envelope, ToolCall
from streams.replay.backtest import NEWLY_BLOCKED
from streams.replay.per_rule import (
    RULES,
    differing_rules,
    one_rule_fleet,
    per_rule_backtest,
    rule_value,
)
from streams.replay.per_rule_report import PerRuleBacktested, per_rule_dict, print_per_rule
from streams.replay.sources import ReadStats

COMPAT = {"enabled": True, "compat": "openclaw"}
SHIPPED = {"enabled": True}


def recorded_traffic() -> list:
    """Three runs recorded under compat mode: a stuck build whose output carries the time,
    a stable ping-pong, and a run whose every call fails differently."""
    lg = loop_guard(**COMPAT)
    events = []
    build = Run(lg, "build-loop", "coder")
    for i in range(30):
        build.cycle(
            "exec", {"command": "make"}, exec_result(f"failed at 10:00:{i:02d}", exit_code=2)
        )
    pong = Run(lg, "ping-pong", "coder", start_time=1_800_000_000_000)
    for i in range(30):
        tool = ("read", "write")[i % 2]
        pong.cycle(tool, {"p": tool}, text_result("same"))
    failing = Run(lg, "failing", "ops", start_time=1_900_000_000_000)
    for i in range(12):
        failing.cycle("fetch", {"u": i}, error=f"HTTP 500 ({i})")
    for run in (build, pong, failing):
        events += run.events
    return events


def test_differing_rules_name_the_blocks_that_set_them_otherwise():
    assert differing_rules(fleet(COMPAT), fleet(COMPAT)) == {}
    assert set(differing_rules(fleet(COMPAT), fleet(SHIPPED))) == set(RULES)
    doc = {
        "tools": {"loopDetection": COMPAT},
        "agents": {"list": [{"id": "coder", "tools": {"loopDetection": {"compat": "loopguard"}}}]},
    }
    both = differing_rules(fleet(COMPAT), fleet(doc))
    assert set(both) == set(RULES) and all(blocks == ["coder"] for blocks in both.values())


def test_a_one_rule_variant_changes_that_rule_only():
    base, cand = fleet(COMPAT), fleet(SHIPPED)
    for rule in RULES:
        variant = one_rule_fleet(base, cand, rule).for_agent("any")
        before = base.for_agent("any")
        assert rule_value(variant, rule) is True and rule_value(before, rule) is False
        others = [r for r in RULES if r != rule]
        assert [rule_value(variant, r) for r in others] == [rule_value(before, r) for r in others]


def test_each_rule_alone_on_recorded_traffic():
    events = recorded_traffic()
    result = per_rule_backtest(fleet(COMPAT), fleet(SHIPPED), events)
    assert result.compared == 3 and result.skipped == [] and not result.other_differences
    by_rule = {r.rule: r for r in result.rules}

    masked = by_rule["deviations.maskExecOutput"]
    (run,) = masked.runs
    assert run.run_id == "build-loop" and run.change == NEWLY_BLOCKED
    assert run.baseline.worst == "warn"  # the reference never gets past a warning here
    build_calls = [
        e.envelope.seq
        for e in events
        if isinstance(e, ToolCall) and e.envelope.run_id == "build-loop"
    ]
    after_stop = [s for s in build_calls if s >= run.candidate.stop_seq]
    assert run.calls_moved == -len(after_stop)  # stopped that many calls before the run's end
    assert run.changed_calls == len(run.changed_seqs)

    errors = by_rule["detectors.consecutiveErrors"]
    assert [r.run_id for r in errors.runs] == ["failing"]
    assert errors.runs[0].candidate.stop_detector == "consecutive_errors"

    # Counting the earlier calls only, ping-pong would block one call later; but the recorded
    # run shows the baseline's block enforced (a veto, no outcome, for the call the variant
    # lets through), so after it there is no stable alternation left to block: the variant
    # never stops the run, the calls after the recorded block are the difference.
    (pong,) = by_rule["deviations.pingPongEarlierCalls"].runs
    assert pong.run_id == "ping-pong" and pong.candidate.stop_seq is None
    pong_calls = [
        e.envelope.seq
        for e in events
        if isinstance(e, ToolCall) and e.envelope.run_id == "ping-pong"
    ]
    assert pong.calls_moved == sum(1 for s in pong_calls if s >= pong.baseline.stop_seq)

    untouched = ("updatePlanShape", "sendsByToolName", "carryGuardCounts", "resultToOpenCall")
    for name in untouched:
        assert by_rule[f"deviations.{name}"].runs == [], name


def triangle_sends(rounds: int) -> list:
    """Three agents' runs passing the same message round (loops between agents)."""
    events, seqs = [], {}
    for n in range(rounds * 3):
        sender, target = (("a", "b"), ("b", "c"), ("c", "a"))[n % 3]
        seqs[sender] = seqs.get(sender, 0) + 1
        env = Envelope(f"run-{sender}", sender, "gw", seqs[sender], 1_000_000 + 1000 * n)
        args = json.dumps({"sessionKey": f"agent:{target}:main", "message": "news?"})
        events.append(ToolCall(env, "sessions_send", args))
    return events


def test_agent_cycles_is_a_rule_of_its_own():
    """compat switches loops between agents off: moving to the shipped rules switches them on,
    a row of its own, not a difference the rule rows leave unexplained."""
    result = per_rule_backtest(fleet(COMPAT), fleet(SHIPPED), triangle_sends(6))
    assert not result.other_differences
    rows = {r.rule: r for r in result.rules}
    cycles = rows["agentCycles.enabled"]
    assert cycles.value is True and cycles.blocks == ["*"]
    assert {r.run_id for r in cycles.runs} == {"run-a", "run-b", "run-c"}
    assert all(r.candidate.worst == "block" for r in cycles.runs)
    assert all(not r.runs for rule, r in rows.items() if rule != "agentCycles.enabled")


def test_thresholds_changed_alongside_are_said_not_split():
    result = per_rule_backtest(
        fleet(COMPAT), fleet({**SHIPPED, "warningThreshold": 4}), recorded_traffic()
    )
    assert result.other_differences


def test_report_text_and_json():
    result = per_rule_backtest(fleet(COMPAT), fleet(SHIPPED), recorded_traffic())
    done = PerRuleBacktested("file x.jsonl", "next.json5", "now.json5", ReadStats(), result)
    out = io.StringIO()
    print_per_rule(done, out)
    text = out.getvalue()
    assert "each rule switched alone over the baseline:" in text
    assert "deviations.maskExecOutput -> on: 1 run(s)" in text
    assert "build-loop  agent=coder" in text and "call(s) earlier" in text
    assert f"summary: {len(RULES)} rule(s) differ, 3 run(s) compared, 0 not compared" in text
    doc = json.loads(json.dumps(per_rule_dict(done, 0)))
    rows = {row["rule"]: row for row in doc["rules"]}
    assert rows["deviations.maskExecOutput"]["stopped_earlier"]["runs"] == 1
    assert rows["deviations.maskExecOutput"]["calls_changed"] == result.rules[3].changed_calls


def test_a_run_whose_start_is_missing_is_not_compared():
    events = [
        e
        for e in recorded_traffic()
        if not (e.envelope.run_id == "failing" and e.envelope.seq == 1)
    ]
    result = per_rule_backtest(fleet(COMPAT), fleet(SHIPPED), events)
    assert result.skipped == ["failing"] and result.compared == 2


def test_issue_44s_rules_alone_on_recorded_traffic():
    """A failing command retried with jittered knobs and a session_status loop, recorded under
    compat mode (each call new to exact hashing: warnings only): each of issue 44's switches
    alone blocks its own loop and changes nothing in the other."""
    lg = loop_guard(**COMPAT)
    jitter = Run(lg, "jittered-exec", "coder")
    for i in range(30):
        args = {"command": "gog events --from today", "pty": i % 2 == 0, "timeout": 30 + i % 7}
        jitter.cycle("exec", args, exec_result("error: unknown flag: --from", exit_code=1))
    status = Run(lg, "status-loop", "coder", start_time=1_800_000_000_000)
    for i in range(30):
        card = f"🧮 Tokens: {94 + i}k in / {2 + i // 10}k out\n🧵 updated {i // 8}m ago"
        status.cycle("session_status", {}, text_result(card))
    result = per_rule_backtest(fleet(COMPAT), fleet(SHIPPED), jitter.events + status.events)
    by_rule = {r.rule: r for r in result.rules}
    for rule, run_id, before in (
        ("deviations.ignoreExecutionKnobs", "jittered-exec", None),  # no args twice in 10
        ("deviations.maskStatusResults", "status-loop", "warn"),  # the same args, new cards
    ):
        (run,) = by_rule[rule].runs
        assert run.run_id == run_id and run.change == NEWLY_BLOCKED, rule
        assert run.baseline.worst == before and run.candidate.stop_detector == "generic_repeat"


def test_bursts_alone_on_recorded_traffic():
    """A 60-call burst of one assistant turn cycling over three URLs, recorded under compat
    mode with its turn id (the results after the calls): only ``detectors.burstRepeat`` stops
    it, on its 20th call."""
    burst = Run(loop_guard(**COMPAT), "burst", "researcher")
    urls = [f"https://docs.example/{name}" for name in "abc"] * 20
    for n, url in enumerate(urls):
        call = ToolCall(
            burst.envelope(), "web_fetch", json.dumps({"url": url}), f"c{n}", turn_id="m"
        )
        burst.events.append(call)
        burst.feed(call)
    for n, url in enumerate(urls):
        burst.result("web_fetch", {"url": url}, text_result(f"page {url}"), call_id=f"c{n}")
    result = per_rule_backtest(fleet(COMPAT), fleet(SHIPPED), burst.events)
    stopped = {r.rule for r in result.rules for run in r.runs if run.change == NEWLY_BLOCKED}
    assert stopped == {"detectors.burstRepeat"}
    (run,) = next(r for r in result.rules if r.rule == "detectors.burstRepeat").runs
    assert run.candidate.stop_detector == "burst_repeat" and run.candidate.stop_seq == 20
