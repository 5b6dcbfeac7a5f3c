"""One rule set's figures over the corpus: what it did to resolved and unresolved runs, to the
runs a reader labelled stuck (and how late, from the call the label names) and not stuck, and
what stopping would have saved.

Savings count only where stopping is right: runs labelled stuck, and unresolved runs not
labelled otherwise. A resolved run's calls after a stop are work lost, shown as a stop of a
resolved run instead. Tokens are the model's usage where the run's events carry it, else
characters of the calls' args and results / 4, kept apart as an estimate.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .corpus import RESOLVED, UNRESOLVED, Label, Run
from .peer_rules import Level
from .verdicts import RunVerdict


@dataclass(frozen=True)
class Stop:
    run_id: str
    rule: str
    call: int

    def __str__(self) -> str:
        return f"{self.run_id} ({self.rule}, call {self.call})"


@dataclass
class RowScore:
    name: str
    runs: int = 0
    calls: int = 0
    resolved: Counter[str] = field(default_factory=Counter)  # warn / block / abort
    unresolved: Counter[str] = field(default_factory=Counter)
    stuck: int = 0  # runs labelled stuck
    stuck_stopped: int = 0
    delays: list[int] = field(default_factory=list)  # stop call - from_call, per stuck run
    not_stuck: int = 0  # runs labelled not stuck
    false_stops: list[Stop] = field(default_factory=list)  # of runs labelled not stuck
    resolved_stops: list[Stop] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)  # every run's first stop (JSON only)
    calls_saved: int = 0
    tokens_saved: int = 0
    tokens_estimated: int = 0
    first_stops: Counter[str] = field(default_factory=Counter)  # rule -> runs it stopped first
    first_stops_resolved: Counter[str] = field(default_factory=Counter)
    first_stops_stuck: Counter[str] = field(default_factory=Counter)

    @property
    def delay_median(self) -> float | None:
        return statistics.median(self.delays) if self.delays else None

    @property
    def delay_max(self) -> int | None:
        return max(self.delays) if self.delays else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule_set": self.name,
            "runs": self.runs,
            "calls": self.calls,
            "resolved": {a: self.resolved[a] for a in ("warn", "block", "abort")},
            "unresolved": {a: self.unresolved[a] for a in ("warn", "block", "abort")},
            "stuck_labelled": self.stuck,
            "stuck_stopped": self.stuck_stopped,
            "stop_delay_calls": {
                "median": self.delay_median,
                "max": self.delay_max,
                "each": sorted(self.delays),
            },
            "not_stuck_labelled": self.not_stuck,
            "false_stops": [vars(s) for s in self.false_stops],
            "resolved_stops": [vars(s) for s in self.resolved_stops],
            "stops": [vars(s) for s in self.stops],
            "calls_saved": self.calls_saved,
            "tokens_saved": self.tokens_saved,
            "tokens_saved_estimated": self.tokens_estimated,
            "first_stops_by_rule": {
                rule: {
                    "runs": n,
                    "resolved": self.first_stops_resolved[rule],
                    "stuck": self.first_stops_stuck[rule],
                }
                for rule, n in self.first_stops.most_common()
            },
        }


ACTION_NAME = {Level.WARN: "warn", Level.BLOCK: "block", Level.ABORT: "abort"}


def score(
    name: str, runs: dict[str, Run], verdicts: dict[str, RunVerdict], labels: dict[str, Label]
) -> RowScore:
    row = RowScore(name, len(runs), sum(run.calls for run in runs.values()))
    for run_id, run in runs.items():
        verdict = verdicts.get(run_id, RunVerdict())
        label = labels.get(run_id)
        if verdict.worst != Level.NONE:
            by_outcome = {RESOLVED: row.resolved, UNRESOLVED: row.unresolved}.get(run.outcome)
            if by_outcome is not None:
                by_outcome[ACTION_NAME[verdict.worst]] += 1
        if label is not None:
            row.stuck += label.stuck
            row.not_stuck += not label.stuck
        if verdict.stop_call is None:
            continue
        stop = Stop(run_id, verdict.stop_rule, verdict.stop_call)
        row.stops.append(stop)
        row.first_stops[stop.rule] += 1
        if run.outcome == RESOLVED:
            row.resolved_stops.append(stop)
            row.first_stops_resolved[stop.rule] += 1
        if label is not None and label.stuck:
            row.stuck_stopped += 1
            row.first_stops_stuck[stop.rule] += 1
            if label.from_call is not None:
                row.delays.append(stop.call - label.from_call)
        elif label is not None:
            row.false_stops.append(stop)
        if (label is not None and label.stuck) or (label is None and run.outcome == UNRESOLVED):
            save(row, run, stop.call)
    return row


def save(row: RowScore, run: Run, stop_call: int) -> None:
    row.calls_saved += max(0, run.calls - stop_call + 1)
    tokens, estimated = run.tokens_from(stop_call)
    if estimated:
        row.tokens_estimated += tokens
    else:
        row.tokens_saved += tokens
