"""Failure detectors (loopguard extension, issue 17): ``consecutiveErrors`` and ``errorRepeat``.

The reference's detectors only ever see failures as outcomes to compare, so an agent whose
every call fails in a different way (different tools, slightly different args) never trips
them, and the same call failing with the same error is only stopped at the critical
threshold of a generic repeat (20 by default). These two rules close that gap:

- ``consecutive_errors``: the run's last N tool outcomes were all failures, whatever the tool
  or args (warn at ``consecutiveErrors.warningThreshold``, block at ``criticalThreshold``);
- ``error_repeat``: the current call's identical-outcome streak is a streak of the same
  error (block at ``errorRepeatThreshold``, 4 by default: the fifth identical attempt).

A failure is a ToolResult whose ``error`` is set (the schema's definition); an exec that ran
and exited non-zero is a command outcome, not a failed tool call. Counts follow the
detectors' convention: earlier outcomes only, the current call never included.

:func:`detect_with_failures` combines them with the reference chain so that the reference's
verdicts stand wherever these rules have nothing more severe to say: a reference critical
wins, then a failure critical, then a reference warning, then a failure warning.
"""

from __future__ import annotations

from streams.core.config import LoopDetectionConfig
from streams.core.detectors import CRITICAL, WARNING, CurrentCall, Detection, detect
from streams.core.events import ToolResult
from streams.core.hashing import result_outcome
from streams.core.history import RunHistory

# hashing.py hashes an error outcome as "error:" + digest(message).
ERROR_HASH_PREFIX = "error:"


def next_error_streak(streak: int, failed: bool, veto: bool) -> int:
    """The run's failure streak after one tool outcome (a result with nothing in it is no
    outcome and never gets here).

    A failure extends it, any other outcome ends it; loopguard's own veto (the gateway
    refused the call) is neither, so a blocked run keeps its streak and escalates.
    """
    if veto:
        return streak
    return streak + 1 if failed else 0


def unmatched_error_streak(streak: int, event: ToolResult, cfg: LoopDetectionConfig) -> int:
    """The run's failure streak after a result with neither args nor call id while no call of
    its tool is open: it matches no call, so it is no outcome for the history or the guard
    (recorded as a call of its own it would alternate with the real calls: false ping-pong).
    A failure still counts towards the failure streak, whatever call it ended."""
    outcome = result_outcome(event.tool_name, None, event.result_json, event.error, cfg.hash_rules)
    view = cfg.per_tool.get(event.tool_name)
    exempt = view is not None and "consecutiveErrors" in view.exempt
    if outcome.result_hash is not None and not (exempt and event.error is not None):
        return next_error_streak(streak, event.error is not None, outcome.loop_veto)
    return streak


def consecutive_errors(
    streak: int, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    if streak >= cfg.consecutive_errors_critical:
        return Detection(
            CRITICAL,
            "consecutive_errors",
            streak,
            f"CRITICAL: your last {streak} tool calls all failed. Session execution blocked: "
            "stop calling tools and report what is failing.",
        )
    if streak >= cfg.consecutive_errors_warning:
        return Detection(
            WARNING,
            "consecutive_errors",
            streak,
            f"WARNING: your last {streak} tool calls all failed. Stop and reconsider the "
            "approach, or report the task as failed.",
        )
    return None


def error_repeat(
    streak: int, latest: str | None, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    """The same tool and args failed with the same error ``streak`` times in a row."""
    if latest is None or not latest.startswith(ERROR_HASH_PREFIX):
        return None
    if streak < cfg.error_repeat_threshold:
        return None
    return Detection(
        CRITICAL,
        "error_repeat",
        streak,
        f"CRITICAL: {call.tool_name} failed {streak} times with identical arguments and the "
        "same error. Session execution blocked: retrying it unchanged will fail again.",
        latest,
    )


def detect_with_failures(
    history: RunHistory,
    error_streak: int,
    tool_name: str,
    sig: str,
    known_poll: bool,
    cfg: LoopDetectionConfig,
) -> Detection | None:
    """The reference chain plus the failure rules, most severe first (see the module doc).

    On the path of every call: the failure rules cost two comparisons and a dict lookup
    unless the run is failing (a streak at the warning, or this call's last outcome an error).
    """
    hit = detect(history, tool_name, sig, known_poll, cfg)
    if cfg.enabled is not True or (hit is not None and hit.level == CRITICAL):
        return hit
    switches = cfg.detectors
    extra = None
    if switches.error_repeat:
        latest = history.latest_result(sig)
        if latest is not None and (latest.result_hash or "").startswith(ERROR_HASH_PREFIX):
            streak, latest_hash = history.no_progress_streak(sig)
            extra = error_repeat(streak, latest_hash, CurrentCall(tool_name, sig, known_poll), cfg)
    if extra is None and switches.consecutive_errors:
        if error_streak < cfg.consecutive_errors_warning:
            return hit
        extra = consecutive_errors(error_streak, CurrentCall(tool_name, sig, known_poll), cfg)
    if extra is None:
        return hit
    if hit is None or extra.level == CRITICAL:
        return extra
    return hit
