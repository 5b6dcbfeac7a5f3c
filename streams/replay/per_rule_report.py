"""How ``loopguard backtest --per-rule`` reports (issue 29): one row per rule switched alone
against the baseline, then the runs each rule changes; one JSON document with ``--json``."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO

from streams.replay.per_rule import PerRuleResult, RuleResult, RunDelta
from streams.replay.sources import ReadStats

RUNS_LISTED = 20  # runs printed per rule (the JSON lists them all)


@dataclass
class PerRuleBacktested:
    source: str
    candidate: str
    baseline: str
    stats: ReadStats
    result: PerRuleResult
    elapsed: float = 0.0


def per_rule_dict(done: PerRuleBacktested, code: int) -> dict[str, Any]:
    result = done.result
    return {
        "source": done.source,
        "candidate_config": done.candidate,
        "baseline_config": done.baseline,
        "events": done.stats.selected,
        "undecodable": done.stats.undecodable,
        "runs_compared": result.compared,
        "runs_not_compared": result.skipped,
        "other_differences": result.other_differences,
        "rules": [rule.to_dict() for rule in result.rules],
        "exit_code": code,
        "seconds": round(done.elapsed, 3),
    }


def _moved(rule: RuleResult, earlier: bool) -> str:
    runs = rule.moved(earlier)
    if not runs:
        return "0"
    calls = sum(abs(r.calls_moved) for r in runs)
    return f"{len(runs)} run(s), {calls} call(s)"


def rule_lines(result: PerRuleResult) -> list[str]:
    """The table: per rule, where it is set otherwise, runs and calls changed, and the runs
    whose loops it stops earlier or later (with the tool calls between the two stops)."""
    head = ("rule", "to", "set in", "runs", "calls", "stops earlier", "stops later")
    body = [
        (
            rule.rule,
            "on" if rule.value else "off",
            ",".join(rule.blocks),
            str(len(rule.runs)),
            str(rule.changed_calls),
            _moved(rule, True),
            _moved(rule, False),
        )
        for rule in result.rules
    ]
    widths = [max(len(r[i]) for r in (head, *body)) for i in range(len(head))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in (head, *body)
    ]


def _stop(delta: RunDelta, side: str) -> str:
    """``block at seq 40 (ping_pong), abort at seq 48 (ping_pong)``, or ``warn only``."""
    o = delta.baseline if side == "baseline" else delta.candidate
    if o.stop_seq is None:
        return "no decision" if o.worst is None else f"{o.worst} only"
    if o.worst == "abort" and o.worst_seq == o.stop_seq:
        return f"abort at seq {o.stop_seq} ({o.stop_detector})"
    text = f"block at seq {o.stop_seq} ({o.stop_detector})"
    if o.worst == "abort":
        text += f", abort at seq {o.worst_seq} ({o.worst_detector})"
    return text


def run_line(delta: RunDelta) -> str:
    moved = ""
    if delta.calls_moved:
        way = "earlier" if delta.calls_moved < 0 else "later"
        moved = f", stopped {abs(delta.calls_moved)} call(s) {way}"
    seqs = ",".join(str(s) for s in delta.changed_seqs[:8])
    if len(delta.changed_seqs) > 8:
        seqs += ",…"
    changed = f"{delta.changed_calls} call(s)"
    if delta.changed_calls != len(delta.changed_seqs):  # results and compactions decide too
        changed = f"{len(delta.changed_seqs)} event(s), {delta.changed_calls} of them calls,"
    return (
        f"    {delta.run_id}  agent={delta.agent_id or '-'}  {changed} decided otherwise "
        f"(seq {seqs}): {_stop(delta, 'baseline')} -> {_stop(delta, 'candidate')}{moved}"
    )


def print_per_rule(done: PerRuleBacktested, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    result = done.result
    print(
        f"per-rule backtest of {done.candidate} against {done.baseline} on "
        f"{done.stats.selected} events of {result.compared + len(result.skipped)} run(s) from "
        f"{done.source} in {done.elapsed:.1f}s",
        file=out,
    )
    done.stats.print_undecodable(out)
    if not result.rules:
        print("the two configs set every rule alike: nothing to compare rule by rule", file=out)
    else:
        print("each rule switched alone over the baseline:", file=out)
        for line in rule_lines(result):
            print(f"  {line}", file=out)
    for rule in result.rules:
        if not rule.runs:
            continue
        print(f"{rule.rule} -> {'on' if rule.value else 'off'}: {len(rule.runs)} run(s)", file=out)
        for delta in rule.runs[:RUNS_LISTED]:
            print(run_line(delta), file=out)
        if len(rule.runs) > RUNS_LISTED:
            print(f"    … {len(rule.runs) - RUNS_LISTED} more (--json lists them all)", file=out)
    if result.other_differences:
        print(
            "note: the candidate also changes settings that are not rule switches (thresholds, "
            "mode, …); run the backtest without --per-rule to see them together",
            file=out,
        )
    for run_id in result.skipped:
        print(f"not compared: run {run_id} (its first events are outside the selection)", file=out)
    print(
        f"summary: {len(result.rules)} rule(s) differ, {result.compared} run(s) compared, "
        f"{len(result.skipped)} not compared",
        file=out,
    )
