"""How a backtest is reported: a table per agent and detector plus the runs that would end
differently, for a person; one JSON document (``--json``) for scripts; both from the same
:class:`~streams.replay.backtest.BacktestResult`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO

from streams.replay.backtest import (
    ACTIONS,
    MOVED,
    NEWLY,
    NO_LONGER,
    BacktestResult,
    Baseline,
    Outcome,
    RunChange,
)
from streams.replay.compare import INCOMPLETE
from streams.replay.sources import ReadStats


@dataclass
class Backtested:
    """One backtest as reported: its source, the two sides, what was read, the result."""

    source: str
    candidate: str
    baseline: Baseline
    stats: ReadStats
    result: BacktestResult
    elapsed: float = 0.0


def backtest_dict(done: Backtested, code: int) -> dict[str, Any]:
    """The whole backtest as one JSON-ready document (``code``: the command's exit code)."""
    result, stats = done.result, done.stats
    return {
        "source": done.source,
        "candidate_config": done.candidate,
        "baseline": {
            "kind": done.baseline.kind,
            "description": done.baseline.description,
            "reason": done.baseline.reason or None,
        },
        "messages": stats.messages,
        "events": stats.selected,
        "undecodable": stats.undecodable,
        "undecodable_samples": stats.samples,
        "runs_compared": result.compared,
        "runs_not_compared": [
            {
                "run_id": r.run_id,
                "agent_id": r.agent_id,
                "status": r.status,
                "first_seq": r.first_seq,
            }
            for r in result.skipped
        ],
        "by_agent_detector": [row.to_dict() for row in result.rows],
        "totals": {"baseline": result.totals("baseline"), "candidate": result.totals("candidate")},
        "newly_stopped": [c.to_dict() for c in result.of(NEWLY)],
        "no_longer_stopped": [c.to_dict() for c in result.of(NO_LONGER)],
        "stopped_at_another_seq": [c.to_dict() for c in result.of(MOVED)],
        "exit_code": code,
        "seconds": round(done.elapsed, 3),
    }


def _cell(before: int, after: int) -> str:
    if before == after:
        return str(before)
    return f"{before} -> {after} ({after - before:+d})"


def table_lines(result: BacktestResult) -> list[str]:
    """Warns, blocks and aborts per agent and detector: ``baseline -> candidate (delta)``."""
    head = ("agent", "detector", *ACTIONS)
    body = [
        (
            row.agent_id or "-",
            row.detector,
            *(_cell(row.baseline[a], row.candidate[a]) for a in ACTIONS),
        )
        for row in result.rows
    ]
    base, cand = result.totals("baseline"), result.totals("candidate")
    body.append(("total", "", *(_cell(base[a], cand[a]) for a in ACTIONS)))
    widths = [max(len(r[i]) for r in (head, *body)) for i in range(len(head))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in (head, *body)
    ]


def _ending(o: Outcome) -> str:
    """``abort at seq 26 (run_aborted; first stop: block at seq 18, generic_repeat)``."""
    if o.worst is None:
        return "no decision"
    text = f"{o.worst} at seq {o.worst_seq} ({o.worst_detector}"
    if o.stop_seq is not None and o.stop_seq != o.worst_seq:
        text += f"; first stop at seq {o.stop_seq}, {o.stop_detector}"
    return text + ")"


def change_line(change: RunChange) -> str:
    return (
        f"  {change.run_id}  agent={change.agent_id or '-'}  {_ending(change.baseline)} -> "
        f"{_ending(change.candidate)}"
    )


def print_backtest(done: Backtested, out: TextIO | None = None) -> None:
    """The whole backtest as text (stdout unless ``out`` is given)."""
    out = out or sys.stdout
    result = done.result
    print(
        f"backtest of {done.candidate} on {done.stats.selected} events of "
        f"{result.compared + len(result.skipped)} run(s) from {done.source} "
        f"in {done.elapsed:.1f}s",
        file=out,
    )
    reason = f" ({done.baseline.reason})" if done.baseline.reason else ""
    print(f"baseline: {done.baseline.description}{reason}", file=out)
    done.stats.print_undecodable(out)
    if result.rows:
        for line in table_lines(result):
            print(line, file=out)
    else:
        print("no warn, block or abort on either side", file=out)
    sections = (
        ("runs newly blocked or aborted", NEWLY),
        ("runs no longer blocked or aborted", NO_LONGER),
        ("runs stopped at another seq", MOVED),
    )
    if not result.changes:
        print("no run would be stopped (blocked or aborted) differently", file=out)
    for title, kinds in sections:
        changes = result.of(kinds)
        if changes:
            print(f"{title} ({len(changes)}):", file=out)
            for change in changes:
                print(change_line(change), file=out)
    for report in result.skipped:
        why = (
            f"its events start at seq {report.first_seq}"
            if report.status == INCOMPLETE
            else "no events of it in the selection"
        )
        print(f"not compared: run {report.run_id} ({why})", file=out)
    print(
        f"summary: {result.compared} run(s) compared, {len(result.of(NEWLY))} newly stopped, "
        f"{len(result.of(NO_LONGER))} no longer stopped, {len(result.of(MOVED))} stopped at "
        f"another seq, {len(result.skipped)} not compared",
        file=out,
    )
