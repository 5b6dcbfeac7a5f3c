"""The decisions a run sends its gateway, built from what the detectors and the
post-compaction guard found: action, reason, error code and the fields every decision carries.
"""

from __future__ import annotations

from typing import Any

from streams.core.config import LoopDetectionConfig
from streams.core.detectors import CRITICAL, CurrentCall, Detection
from streams.core.events import (
    Action,
    AgentEvent,
    CompactionRetry,
    Decision,
    ToolCall,
    ToolResult,
)
from streams.core.guard import CompactionLoop


def build_decision(
    run_id: str, event: AgentEvent, cfg: LoopDetectionConfig, action: Action, **fields: Any
) -> Decision:
    """A decision of run ``run_id`` about ``event``, under config ``cfg``."""
    env = event.envelope
    return Decision(
        run_id=run_id,
        agent_id=env.agent_id,
        gateway_id=env.gateway_id,
        seq=env.seq,
        event_time=env.event_time,
        action=action,
        config_version=cfg.version,
        enforced=cfg.enforced,
        **fields,
    )


def detection_decision(
    run_id: str,
    event: ToolCall,
    call: CurrentCall,
    hit: Detection,
    cfg: LoopDetectionConfig,
    blocks: int,
    ignored: list[str] | None = None,
) -> Decision:
    """What a detector's finding on a call means for the gateway: a warning, a block, or an
    abort once the run has been blocked ``blocks`` times (this block included). With
    ``deviations.escalateBlocks`` off every critical is a block, as in the reference.
    ``ignored``: the call's args left out of its identity (call_identity.py), named in the
    reason and in ``extra["ignored_args"]``."""
    action, error_code, reason = Action.WARN, "", hit.message
    if hit.level == CRITICAL:
        action = Action.BLOCK
        escalate = cfg.deviations.escalate_blocks
        if escalate and hit.detector == "global_circuit_breaker":
            action, error_code = Action.ABORT, "global_circuit_breaker"
        elif escalate and blocks >= cfg.abort_after_blocks:
            # The gateway blocked and the agent kept looping: stop the run.
            action, error_code = Action.ABORT, "loop_persisted_after_block"
            reason = f"{hit.message} Blocked {blocks} times; aborting the run."
    extra = {"blocks": str(blocks)} if hit.level == CRITICAL else {}
    if ignored:
        names = ", ".join(ignored)
        reason = (
            f"{reason} (Compared without {names}: they change how {call.tool_name} runs, "
            "not what it does.)"
        )
        extra["ignored_args"] = ",".join(ignored)
    return build_decision(
        run_id,
        event,
        cfg,
        action,
        detector=hit.detector,
        severity=hit.level,
        count=hit.count,
        tool_name=call.tool_name,
        reason=reason,
        args_hash=call.sig,
        result_hash=hit.result_hash,
        paired_tool_name=hit.paired_tool_name,
        error_code=error_code,
        extra=extra,
    )


def compaction_loop_decision(
    run_id: str, event: ToolResult, cfg: LoopDetectionConfig, loop: CompactionLoop
) -> Decision:
    """Abort: the post-compaction guard saw the same call and result repeat."""
    return build_decision(
        run_id,
        event,
        cfg,
        Action.ABORT,
        detector="post_compaction_guard",
        severity=CRITICAL,
        count=loop.count,
        tool_name=loop.tool_name,
        reason=(
            f"compaction_loop_persisted: {loop.tool_name} produced the same call and "
            f"result {loop.count} times after compaction; aborting the run."
        ),
        args_hash=loop.sig,
        result_hash=loop.result_hash,
        error_code="compaction_loop_persisted",
    )


def compaction_storm_decision(
    run_id: str, event: CompactionRetry, cfg: LoopDetectionConfig, storm: int, tool_name: str
) -> Decision:
    """Abort: ``storm + 1`` compaction retries in a row with no progress between them
    (``tool_name``: the run's newest call, if any)."""
    return build_decision(
        run_id,
        event,
        cfg,
        Action.ABORT,
        detector="compaction_storm",
        severity=CRITICAL,
        count=storm,
        tool_name=tool_name,
        reason=(
            f"compaction_storm: {storm + 1} compaction retries in a row with no progress "
            "between them; aborting the run."
        ),
        error_code="compaction_storm",
    )


def run_aborted_decision(
    run_id: str, event: ToolCall, cfg: LoopDetectionConfig, blocks: int
) -> Decision:
    """Repeat the abort for a gateway that kept calling tools after it."""
    return build_decision(
        run_id,
        event,
        cfg,
        Action.ABORT,
        detector="run_aborted",
        severity=CRITICAL,
        count=blocks,
        tool_name=event.tool_name,
        reason="Run was aborted by loopguard; no further tool calls are allowed.",
        error_code="run_aborted",
    )
