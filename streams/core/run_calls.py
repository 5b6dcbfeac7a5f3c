"""Judging one tool call of a run: the rolling detectors, the rules that see progress, the
session's failing calls and the turn's burst, then the call's place in the history (or its
hold, when a block may be vetoed) and the decision it draws.
"""

from __future__ import annotations

from streams.core.call_identity import ignored_args
from streams.core.canonical import parse_json
from streams.core.config import LoopDetectionConfig
from streams.core.decisions import detection_decision
from streams.core.detectors import CRITICAL, CurrentCall, Detection
from streams.core.events import Action, AgentEvent, Decision, ToolCall
from streams.core.failures import detect_with_failures
from streams.core.hashing import MEMO_MAX_CHARS, call_info
from streams.core.held_call import HeldCall
from streams.core.progress import detect_progress
from streams.core.run_data import ABORTED, ACTIVE, RunData
from streams.core.session_failures import detect_across_runs


def on_call(run: RunData, event: ToolCall, cfg: LoopDetectionConfig) -> list[Decision]:
    """The decisions ``event`` draws, the call recorded (or held) in ``run``'s history."""
    # perTool: the tool's own view of the config (thresholds, exempt detectors), if any
    per_tool = cfg.per_tool
    view = per_tool.get(event.tool_name) if per_tool else None
    ignored = None if view is None else view.ignored_args
    info = call_info(event.tool_name, event.args_json, cfg.hash_rules, ignored)
    sig, known_poll, action = info.sig, info.known_poll, info.action
    hit = detect_with_failures(
        run.history,
        run.error_streak,
        event.tool_name,
        sig,
        known_poll,
        cfg if view is None else view,
    )
    if hit is None or hit.level != CRITICAL:  # the rules that see progress (issue 38)
        hit = detect_progress(
            hit,
            run.history,
            run.outcomes,
            CurrentCall(event.tool_name, sig, known_poll),
            event.args_json,
            cfg if view is None else view,
        )
    if run.failing.entries and (hit is None or hit.level != CRITICAL):  # issue 44
        hit = detect_across_runs(
            hit,
            run.failing,
            CurrentCall(event.tool_name, sig, known_poll),
            event.args_json,
            cfg if view is None else view,
        )
    if event.turn_id is not None:  # one turn's calls as a set (issue 44, bursts.py)
        hit = run.turn.judge(
            hit,
            event.turn_id,
            CurrentCall(event.tool_name, sig, known_poll),
            event.args_json,
            cfg if view is None else view,
        )
    if hit is not None and hit.level == CRITICAL and not cfg.deviations.veto_is_outcome:
        # As the reference: a blocked call is not recorded (nor its veto an outcome), unless
        # it runs anyway: held until the next event says which (held_call.py).
        decision = decide(run, event, CurrentCall(event.tool_name, sig, known_poll), hit, cfg)
        if run.status == ACTIVE:
            kept = action if isinstance(action, str) else None
            run.held = HeldCall(event.tool_name, sig, event.tool_call_id, known_poll, kept)
        return [decision]
    record = run.history.append_call(
        event.tool_name,
        sig,
        event.tool_call_id,
        known_poll,
        action if isinstance(action, str) else None,
    )
    args = event.args_json
    if event.tool_call_id and args is not None and len(args) <= MEMO_MAX_CHARS:
        record.call_args = (args, info)
    if hit is None:
        return []
    return [decide(run, event, CurrentCall(event.tool_name, sig, known_poll), hit, cfg)]


def settle_held(run: RunData, held: HeldCall, event: AgentEvent, cfg: LoopDetectionConfig) -> None:
    """The blocked call ran unless ``event`` is its veto: then it takes its slot, where
    the reference recorded it, before ``event``."""
    run.held = None
    if not held.vetoed_by(event, cfg.hash_rules):
        run.history.append_call(
            held.tool_name, held.sig, held.tool_call_id, held.known_poll, held.action
        )


def decide(
    run: RunData, event: ToolCall, call: CurrentCall, hit: Detection, cfg: LoopDetectionConfig
) -> Decision:
    """The decision a detection draws; a block counts towards the abort, an abort ends the
    run."""
    if hit.level == CRITICAL:
        run.blocks += 1
    view = cfg.per_tool.get(event.tool_name)
    ignored = ignored_args(  # named in the decision (call_identity.py)
        event.tool_name,
        parse_json(event.args_json),
        cfg.hash_rules,
        None if view is None else view.ignored_args,
    )
    decision = detection_decision(run.run_id, event, call, hit, cfg, run.blocks, ignored)
    if decision.action is Action.ABORT:
        run.status = ABORTED
    return decision
