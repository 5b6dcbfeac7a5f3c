"""What a stricter or looser threshold would have changed on the runs operators labelled
(issue 43, ``loopguard quality``): the labelled runs' events re-run through the core with one
rule's stop threshold moved by -2, -1, +1 and +2 in every block of the fleet config, and, per
threshold, how many labelled false stops (released runs) it still stops and how many labelled
true stops (runs an operator aborted) it stops, and at which seq.

A threshold is the count at which the rule blocks (its ``criticalThreshold`` or the field
that plays that part); a value below 1 is no variant. The config still raises a critical
threshold to one above its warning threshold (streams.core.config), so a stricter variant
may resolve as the current one: the report shows the value each variant resolved to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from streams.core.config import LoopDetectionConfig, merge_blocks, resolve
from streams.core.engine import LoopGuard
from streams.core.events import AgentEvent
from streams.core.fleet import FleetConfig
from streams.replay.backtest import outcome, until_abort
from streams.replay.compare import replay_events

DELTAS = (-2, -1, 0, 1, 2)
# rule (detector) -> the field holding its stop threshold: top-level, or (block, field)
RULE_THRESHOLDS: dict[str, tuple[str, ...]] = {
    "generic_repeat": ("criticalThreshold",),
    "known_poll_no_progress": ("criticalThreshold",),
    "ping_pong": ("criticalThreshold",),
    "global_circuit_breaker": ("globalCircuitBreakerThreshold",),
    "unknown_tool_repeat": ("unknownToolThreshold",),
    "error_repeat": ("errorRepeatThreshold",),
    "consecutive_errors": ("consecutiveErrors", "criticalThreshold"),
    "unchanged_outcome": ("unchangedOutcome", "criticalThreshold"),
    "repeated_cycle": ("repeatedCycle", "criticalThreshold"),
    "burst_repeat": ("burstRepeat", "criticalThreshold"),
    "error_across_runs": ("errorAcrossRuns", "criticalThreshold"),
    "compaction_storm": ("postCompactionGuard", "stormThreshold"),
}
_RESOLVED = {
    "criticalThreshold": "critical_threshold",
    "globalCircuitBreakerThreshold": "global_circuit_breaker_threshold",
    "unknownToolThreshold": "unknown_tool_threshold",
    "errorRepeatThreshold": "error_repeat_threshold",
    "consecutiveErrors": "consecutive_errors_critical",
    "unchangedOutcome": "unchanged_outcome_critical",
    "repeatedCycle": "repeated_cycle_critical",
    "burstRepeat": "burst_repeat_critical",
    "errorAcrossRuns": "error_across_runs_critical",
    "postCompactionGuard": "compaction_storm_threshold",
}


def threshold_name(rule: str) -> str:
    """The config field of ``rule``'s stop threshold, as written in a config file."""
    return ".".join(RULE_THRESHOLDS[rule])


def threshold_of(cfg: LoopDetectionConfig, rule: str) -> int:
    """``rule``'s stop threshold as ``cfg`` resolved it."""
    return int(getattr(cfg, _RESOLVED[RULE_THRESHOLDS[rule][0]]))


def shifted_fleet(fleet: FleetConfig, rule: str, delta: int) -> FleetConfig | None:
    """``fleet`` with ``rule``'s stop threshold moved by ``delta`` in the global block and in
    every agent's (each from the value it resolves to); None when one would drop below 1."""
    path = RULE_THRESHOLDS[rule]

    def shifted(block: dict[str, Any], cfg: LoopDetectionConfig) -> dict[str, Any] | None:
        value = threshold_of(cfg, rule) + delta
        if value < 1:
            return None
        change: dict[str, Any] = {path[0]: value} if len(path) == 1 else {path[0]: {path[1]: value}}
        return merge_blocks(block, change)

    global_block = shifted(fleet.global_block, resolve(fleet.global_block))
    if global_block is None:
        return None
    agents: dict[str, dict[str, Any]] = {}
    for agent, block in fleet.agent_blocks.items():
        moved = shifted(block, fleet.for_agent(agent))
        if moved is None:
            return None
        agents[agent] = moved
    return FleetConfig(global_block, agents)


@dataclass
class Variant:
    """One threshold of one rule, over the labelled runs."""

    delta: int
    value: int  # the global block's threshold, as resolved
    false_stops_kept: int = 0  # released runs it still stops
    true_stops_caught: int = 0  # operator-aborted runs it stops
    stop_seqs: dict[str, int | None] = field(default_factory=dict)  # run -> first stop's seq

    def to_dict(self) -> dict[str, Any]:
        return {
            "delta": self.delta,
            "threshold": self.value,
            "false_stops_kept": self.false_stops_kept,
            "true_stops_caught": self.true_stops_caught,
            "stop_seqs": self.stop_seqs,
        }


@dataclass
class RuleWhatIf:
    """A rule's threshold variants over its labelled runs."""

    rule: str
    field_name: str
    false_stops: int  # labelled runs released
    true_stops: int  # labelled runs aborted by an operator
    variants: list[Variant] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "threshold_field": self.field_name,
            "false_stops_labelled": self.false_stops,
            "true_stops_labelled": self.true_stops,
            "variants": [variant.to_dict() for variant in self.variants],
        }


def stop_seqs(fleet: FleetConfig, events: Iterable[AgentEvent], runs: Iterable[str]) -> dict:
    """Run id -> the seq of the core's first block or abort of it under ``fleet`` (None: never
    stopped), over ``events``."""
    replayed = replay_events(LoopGuard(fleet), events)
    found: dict[str, int | None] = {}
    for run_id in runs:
        run = replayed.get(run_id)
        found[run_id] = None if run is None else outcome(until_abort(run.decisions)).stop_seq
    return found


def threshold_whatif(
    fleet: FleetConfig,
    events: list[AgentEvent],
    labels: dict[str, tuple[str, bool]],
    deltas: tuple[int, ...] = DELTAS,
) -> list[RuleWhatIf]:
    """Per rule that labelled runs name (``labels``: run id -> (rule, stuck)) and that has a
    threshold: each variant's stops of its labelled runs, over ``events`` (theirs)."""
    results: list[RuleWhatIf] = []
    for rule in sorted({rule for rule, _stuck in labels.values() if rule in RULE_THRESHOLDS}):
        runs = {run_id: stuck for run_id, (named, stuck) in labels.items() if named == rule}
        what_if = RuleWhatIf(
            rule,
            threshold_name(rule),
            false_stops=sum(not stuck for stuck in runs.values()),
            true_stops=sum(runs.values()),
        )
        for delta in deltas:
            variant_fleet = fleet if delta == 0 else shifted_fleet(fleet, rule, delta)
            if variant_fleet is None:
                continue
            value = threshold_of(resolve(variant_fleet.global_block), rule)
            variant = Variant(delta, value, stop_seqs=stop_seqs(variant_fleet, events, runs))
            for run_id, stuck in runs.items():
                if variant.stop_seqs[run_id] is None:
                    continue
                if stuck:
                    variant.true_stops_caught += 1
                else:
                    variant.false_stops_kept += 1
            what_if.variants.append(variant)
        results.append(what_if)
    return results
