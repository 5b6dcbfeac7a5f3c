"""Backtest one rule at a time (``loopguard backtest --per-rule``, issue 29): what switching
each deviation from the reference on (or off) would change on recorded traffic, alone.

For every rule switch (``deviations.*``, loopguard's own ``detectors.*`` and
``agentCycles.enabled``, see streams.core.deviations) that the baseline and the candidate
configs resolve differently for some agent, a variant of the baseline is built that takes the
candidate's value of that one switch, everywhere it is set, and nothing else. One read of
the source feeds each event to the baseline and to every variant; per rule the report says
which runs and which calls get another verdict, how the runs end
(:func:`streams.replay.backtest.classify`), and by how many tool calls each loop is stopped
earlier or later.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from streams.core.config import LoopDetectionConfig, merge_blocks, resolve
from streams.core.deviations import DETECTOR_SWITCHES, SWITCHES, switch_values
from streams.core.engine import LoopGuard
from streams.core.events import AgentEvent, Decision, ToolCall
from streams.core.fleet import FleetConfig
from streams.replay.agent_cycles import with_agent_cycles
from streams.replay.backtest import Outcome, classify, outcome, until_abort

GLOBAL = "*"  # the fleet's global block, in a rule's list of agents
RULES = (
    *(f"deviations.{name}" for name in SWITCHES),
    *(f"detectors.{d}" for d in DETECTOR_SWITCHES),
    "agentCycles.enabled",  # loops between agents: off under compat too
)


def rule_value(cfg: LoopDetectionConfig, rule: str) -> bool:
    """The resolved value of ``rule`` (``deviations.x``, ``detectors.y`` or
    ``agentCycles.enabled``) in ``cfg``."""
    section, name = rule.split(".", 1)
    if section == "deviations":
        return switch_values(cfg.deviations)[name]
    if section == "agentCycles":
        return cfg.agent_cycles.enabled
    detectors = cfg.detectors
    return {
        "consecutiveErrors": detectors.consecutive_errors,
        "errorRepeat": detectors.error_repeat,
        "compactionStorm": detectors.compaction_storm,
        "unchangedOutcome": detectors.unchanged_outcome,
        "repeatedCycle": detectors.repeated_cycle,
        "burstRepeat": detectors.burst_repeat,
        "errorAcrossRuns": detectors.error_across_runs,
    }[name]


def _blocks(fleet: FleetConfig, other: FleetConfig) -> list[str]:
    """The global block and every agent either fleet names."""
    return [GLOBAL, *sorted({*fleet.agent_blocks, *other.agent_blocks})]


def _resolved(fleet: FleetConfig, key: str) -> LoopDetectionConfig:
    return resolve(fleet.global_block) if key == GLOBAL else fleet.for_agent(key)


def differing_rules(baseline: FleetConfig, candidate: FleetConfig) -> dict[str, list[str]]:
    """Rule -> the blocks (``*`` or agent ids) whose resolved value the candidate changes."""
    found: dict[str, list[str]] = {}
    for key in _blocks(baseline, candidate):
        before, after = _resolved(baseline, key), _resolved(candidate, key)
        for rule in RULES:
            if rule_value(before, rule) != rule_value(after, rule):
                found.setdefault(rule, []).append(key)
    return {rule: found[rule] for rule in RULES if rule in found}


def one_rule_fleet(baseline: FleetConfig, candidate: FleetConfig, rule: str) -> FleetConfig:
    """The baseline with the candidate's value of ``rule`` set explicitly in every block."""
    section, name = rule.split(".", 1)

    def with_rule(block: dict[str, Any], cfg: LoopDetectionConfig) -> dict[str, Any]:
        return merge_blocks(block, {section: {name: rule_value(cfg, rule)}})

    agents = {
        key: with_rule(baseline.agent_blocks.get(key, {}), candidate.for_agent(key))
        for key in _blocks(baseline, candidate)[1:]
    }
    return FleetConfig(with_rule(baseline.global_block, _resolved(candidate, GLOBAL)), agents)


@dataclass
class RunDelta:
    """One run whose verdicts the rule changes: the seqs (and of them, tool calls) decided
    otherwise, how its ending changes, and the signed number of tool calls between the two
    stops (negative: the variant stops the loop earlier; a side that never stops the run
    stops after its last event)."""

    run_id: str
    agent_id: str
    changed_seqs: list[int]
    changed_calls: int
    change: str | None
    calls_moved: int
    baseline: Outcome
    candidate: Outcome

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "changed_seqs": self.changed_seqs,
            "changed_calls": self.changed_calls,
            "change": self.change,
            "calls_moved": self.calls_moved,
            "baseline": self.baseline.to_dict(),
            "candidate": self.candidate.to_dict(),
        }


@dataclass
class RuleResult:
    """What one rule, switched alone, changes."""

    rule: str
    blocks: list[str]  # where the candidate sets it otherwise (``*``: the global block)
    value: bool  # the candidate's value in the global block
    runs: list[RunDelta] = field(default_factory=list)

    @property
    def changed_calls(self) -> int:
        return sum(r.changed_calls for r in self.runs)

    def moved(self, earlier: bool) -> list[RunDelta]:
        return [r for r in self.runs if (r.calls_moved < 0 if earlier else r.calls_moved > 0)]

    def to_dict(self) -> dict[str, Any]:
        earlier, later = self.moved(True), self.moved(False)
        return {
            "rule": self.rule,
            "blocks": self.blocks,
            "candidate_value": self.value,
            "runs_changed": len(self.runs),
            "calls_changed": self.changed_calls,
            "stopped_earlier": {
                "runs": len(earlier),
                "calls": -sum(r.calls_moved for r in earlier),
            },
            "stopped_later": {"runs": len(later), "calls": sum(r.calls_moved for r in later)},
            "runs": [r.to_dict() for r in self.runs],
        }


class RunTrack:
    """What the per-rule comparison keeps of one run: its tool calls' seqs and its last seq."""

    __slots__ = ("agent_id", "first_seq", "last_seq", "call_seqs")

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.first_seq: int | None = None
        self.last_seq = 0
        self.call_seqs: list[int] = []


class RuleGuards:
    """The baseline guard and one guard per rule variant (each with the agent-cycle guard,
    as the worker), fed the same events."""

    def __init__(self, baseline: FleetConfig, variants: dict[str, FleetConfig]) -> None:
        self.baseline = with_agent_cycles(LoopGuard(baseline))
        self.variants = {
            rule: with_agent_cycles(LoopGuard(fleet)) for rule, fleet in variants.items()
        }
        self.runs: dict[str, RunTrack] = {}
        self.decided: dict[str, dict[str, list[Decision]]] = {"": {}}
        for rule in variants:
            self.decided[rule] = {}

    def feed(self, events: Iterable[AgentEvent]) -> None:
        for event in events:
            env = event.envelope
            track = self.runs.get(env.run_id)
            if track is None:
                track = self.runs[env.run_id] = RunTrack(env.agent_id)
            if track.first_seq is None or env.seq < track.first_seq:
                track.first_seq = env.seq
            track.last_seq = max(track.last_seq, env.seq)
            if isinstance(event, ToolCall):
                track.call_seqs.append(env.seq)
            for name, guard in (("", self.baseline), *self.variants.items()):
                for d in guard.process(event):
                    self.decided[name].setdefault(d.run_id, []).append(d)
        for name, guard in (("", self.baseline), *self.variants.items()):
            for d in guard.finish():  # loops between agents, once every send is in
                self.decided[name].setdefault(d.run_id, []).append(d)


def _verdicts(decisions: list[Decision]) -> dict[int, list[tuple[str, str, str, int]]]:
    by_seq: dict[int, list[tuple[str, str, str, int]]] = {}
    for d in decisions:
        by_seq.setdefault(d.seq, []).append((d.detector, d.severity, d.action.value, d.count))
    return by_seq


def _stop_point(o: Outcome, track: RunTrack) -> int:
    return o.stop_seq if o.stop_seq is not None else track.last_seq + 1


def run_delta(
    run_id: str, track: RunTrack, before: list[Decision], after: list[Decision]
) -> RunDelta | None:
    """The run's :class:`RunDelta`, or None when the rule changes none of its verdicts."""
    before = until_abort(before)
    after = until_abort(after)
    old, new = _verdicts(before), _verdicts(after)
    seqs = sorted(s for s in {*old, *new} if sorted(old.get(s, [])) != sorted(new.get(s, [])))
    if not seqs:
        return None
    calls = set(track.call_seqs)
    base, cand = outcome(before), outcome(after)
    lo, hi = sorted((_stop_point(base, track), _stop_point(cand, track)))
    between = sum(1 for s in track.call_seqs if lo <= s < hi)
    moved = -between if _stop_point(cand, track) < _stop_point(base, track) else between
    return RunDelta(
        run_id,
        track.agent_id,
        seqs,
        sum(1 for s in seqs if s in calls),
        classify(base, cand),
        moved,
        base,
        cand,
    )


@dataclass
class PerRuleResult:
    rules: list[RuleResult]
    compared: int  # runs compared
    skipped: list[str]  # runs whose first events are outside the selection
    other_differences: bool  # the configs differ in more than the rule switches


def per_rule_backtest(
    baseline: FleetConfig, candidate: FleetConfig, events: Iterable[AgentEvent]
) -> PerRuleResult:
    """Run every differing rule alone against the baseline over ``events`` (one pass)."""
    differing = differing_rules(baseline, candidate)
    variants = {rule: one_rule_fleet(baseline, candidate, rule) for rule in differing}
    guards = RuleGuards(baseline, variants)
    guards.feed(events)
    complete = sorted(r for r, t in guards.runs.items() if (t.first_seq or 0) <= 1)
    skipped = sorted(set(guards.runs) - set(complete))
    results = []
    for rule, blocks in differing.items():
        result = RuleResult(rule, blocks, rule_value(_resolved(candidate, GLOBAL), rule))
        for run_id in complete:
            delta = run_delta(
                run_id,
                guards.runs[run_id],
                guards.decided[""].get(run_id, []),
                guards.decided[rule].get(run_id, []),
            )
            if delta is not None:
                result.runs.append(delta)
        results.append(result)
    return PerRuleResult(results, len(complete), skipped, _differs_otherwise(baseline, candidate))


def _differs_otherwise(baseline: FleetConfig, candidate: FleetConfig) -> bool:
    """Whether the candidate changes anything but the rule switches (thresholds, modes…):
    those changes are in the whole backtest, not in any rule's row."""
    every = merge_all(baseline, candidate)
    return any(
        _resolved(every, key).version != _resolved(candidate, key).version
        for key in _blocks(baseline, candidate)
    )


def merge_all(baseline: FleetConfig, candidate: FleetConfig) -> FleetConfig:
    """The baseline with every differing rule taken from the candidate."""
    fleet = baseline
    for rule in differing_rules(baseline, candidate):
        fleet = one_rule_fleet(fleet, candidate, rule)
    return fleet
