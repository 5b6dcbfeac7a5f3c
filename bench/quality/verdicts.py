"""How each rule set treats each run: its most severe answer and its first stop, from
loopguard's core (all runs through one guard, in file order, as ``loopguard backtest`` replays
them) or from a peer rule (a fresh instance per run, fed the run's calls and results).

A stop is the first block or abort. The replay goes on after a block, since the recorded agent
did; for loopguard only ``enforced`` decisions stop (an observe-mode block is a warning).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from streams.core.engine import LoopGuard
from streams.core.events import Action, AgentEvent, Decision, ToolCall, ToolResult
from streams.core.fleet import FleetConfig
from streams.replay.agent_cycles import with_agent_cycles

from .corpus import Run
from .peer_rules import Level, PeerCall, PeerEvent, PeerResult, PeerRule

LEVEL_OF = {Action.WARN: Level.WARN, Action.BLOCK: Level.BLOCK, Action.ABORT: Level.ABORT}


@dataclass(frozen=True)
class RunVerdict:
    """``stop_call``: the first call that would not have run (1-based; ``calls + 1`` when the
    stop came after the run's last call), None when the run was never stopped."""

    worst: Level = Level.NONE
    stop_call: int | None = None
    stop_rule: str = ""


def first_stop(answers: list[tuple[int, Level, str]]) -> RunVerdict:
    """``answers``: (call the answer would stop at, level, rule), in the order they came."""
    worst = max((level for _, level, _ in answers), default=Level.NONE)
    stops = [(call, rule) for call, level, rule in answers if level >= Level.BLOCK]
    if not stops:
        return RunVerdict(worst)
    call, rule = min(stops, key=lambda stop: stop[0])  # min keeps the first of equal calls
    return RunVerdict(worst, call, rule)


def decision_level(decision: Decision) -> Level:
    level = LEVEL_OF[decision.action]
    return level if decision.enforced or level == Level.WARN else Level.WARN


def loopguard_verdicts(
    events: list[AgentEvent], runs: dict[str, Run], fleet: FleetConfig
) -> dict[str, RunVerdict]:
    """Every event through one LoopGuard (with the agent-cycle guard, as the worker runs
    both), then each run's decisions placed at the call they would stop."""
    guard = with_agent_cycles(LoopGuard(fleet))
    decisions: list[Decision] = []
    for event in events:
        decisions.extend(guard.process(event))
    decisions.extend(guard.finish())
    answers: dict[str, list[tuple[int, Level, str]]] = {run_id: [] for run_id in runs}
    for d in sorted(decisions, key=lambda d: (d.run_id, d.seq, d.detector)):
        run = runs.get(d.run_id)
        if run is not None:
            stop_at = run.stop_call.get(d.seq, run.calls + 1)
            answers[d.run_id].append((stop_at, decision_level(d), d.detector))
    return {run_id: first_stop(found) for run_id, found in answers.items()}


def peer_events(run: Run) -> list[tuple[int, PeerEvent]]:
    """The run's calls and results as a peer sees them, each with the call a stop answered on
    it would land at; a result that omits its args gets its call's."""
    args_of: dict[str, str] = {}
    latest_args: dict[str, str] = {}
    seen: list[tuple[int, PeerEvent]] = []
    for event in run.events:
        stop_at = run.stop_call[event.envelope.seq]
        if isinstance(event, ToolCall):
            args = event.args_json or "{}"
            latest_args[event.tool_name] = args
            if event.tool_call_id:
                args_of[event.tool_call_id] = args
            seen.append((stop_at, PeerCall(event.tool_name, args)))
        elif isinstance(event, ToolResult):
            args = event.args_json or (
                args_of.get(event.tool_call_id or "") or latest_args.get(event.tool_name, "{}")
            )
            result = PeerResult(event.tool_name, args, event.result_json, event.error)
            seen.append((stop_at, result))
    return seen


def peer_verdicts(runs: dict[str, Run], make: Callable[[], PeerRule]) -> dict[str, RunVerdict]:
    verdicts: dict[str, RunVerdict] = {}
    for run_id, run in runs.items():
        rule = make()
        answers = []
        for stop_at, event in peer_events(run):
            answer = rule.see(event)
            if answer.level != Level.NONE:
                answers.append((stop_at, answer.level, answer.rule))
        verdicts[run_id] = first_stop(answers)
    return verdicts
