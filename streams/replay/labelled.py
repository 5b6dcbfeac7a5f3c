"""How a backtest's two sides treat the runs operators labelled (issue 43, ``loopguard
backtest --labels-from-audit DB_URL``): a run an operator released is a labelled false stop
(a side that still stops it is wrong), a run an operator aborted a labelled true loop (a side
that stops it is right). Each side's stop is its first block or abort of the run, up to its
first abort (streams.replay.backtest); operators' own decisions are no side's stop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streams.audit.labels import is_rule
from streams.core.events import Decision
from streams.replay.backtest import outcome, until_abort


@dataclass
class LabelledRun:
    run_id: str
    stuck: bool  # aborted by an operator (True) or released (False)
    why: str
    baseline_stop: int | None  # seq of the first block or abort, None: never stopped
    candidate_stop: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "label": "true_stop" if self.stuck else "false_stop",
            "why": self.why,
            "baseline_stop_seq": self.baseline_stop,
            "candidate_stop_seq": self.candidate_stop,
        }


@dataclass
class LabelledScore:
    """Of the labelled runs the backtest replayed, how many each side stops."""

    source: str
    runs: list[LabelledRun] = field(default_factory=list)

    def stopped(self, side: str, stuck: bool) -> int:
        stop = "baseline_stop" if side == "baseline" else "candidate_stop"
        return sum(getattr(r, stop) is not None for r in self.runs if r.stuck == stuck)

    def count(self, stuck: bool) -> int:
        return sum(r.stuck == stuck for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "false_stops": self.count(False),
            "false_stops_stopped": {
                "baseline": self.stopped("baseline", False),
                "candidate": self.stopped("candidate", False),
            },
            "true_stops": self.count(True),
            "true_stops_stopped": {
                "baseline": self.stopped("baseline", True),
                "candidate": self.stopped("candidate", True),
            },
            "runs": [run.to_dict() for run in self.runs],
        }

    def lines(self) -> list[str]:
        if not self.runs:
            return [f"labelled runs ({self.source}): none of them among the replayed runs"]
        return [
            f"labelled runs ({self.source}): {self.count(False)} released (false stops): "
            f"baseline stops {self.stopped('baseline', False)}, candidate stops "
            f"{self.stopped('candidate', False)}; {self.count(True)} aborted by an operator "
            f"(true loops): baseline stops {self.stopped('baseline', True)}, candidate stops "
            f"{self.stopped('candidate', True)}"
        ]


def _stop(decisions: list[Decision]) -> int | None:
    """The rules' first stop: an operator's own abort (or a release) is no rule's."""
    return outcome(until_abort([d for d in decisions if is_rule(d.detector)])).stop_seq


def score_labelled(
    source: str,
    labels: dict[str, tuple[bool, str]],
    candidate: dict[str, list[Decision]],
    baseline: Callable[[str], list[Decision]],
) -> LabelledScore:
    """``labels``: run id -> (stuck, why); ``candidate``: the replayed runs' decisions (a
    labelled run not among them is left out); ``baseline``: a run's baseline decisions."""
    score = LabelledScore(source)
    for run_id in sorted(labels):
        if run_id not in candidate:
            continue
        stuck, why = labels[run_id]
        score.runs.append(
            LabelledRun(run_id, stuck, why, _stop(baseline(run_id)), _stop(candidate[run_id]))
        )
    return score
