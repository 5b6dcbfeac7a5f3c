"""The rolling-history loop detectors, checked in the reference order; the first hit wins.

Each detector looks at the run's history *before* the current call is recorded and at the
call about to happen, exactly like the reference runtime, so counts and thresholds mean the
same here as in the gateway's own documentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.config import LoopDetectionConfig
from streams.history import RunHistory

WARNING = "warning"
CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Detection:
    level: str  # WARNING or CRITICAL
    detector: str
    count: int
    message: str
    result_hash: str = ""
    paired_tool_name: str = ""


@dataclass(frozen=True, slots=True)
class CurrentCall:
    tool_name: str
    sig: str
    known_poll: bool


def unknown_tool_repeat(
    history: RunHistory, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    """Retries of a tool the gateway says does not exist; not governed by ``detectors``."""
    count, missing = history.unknown_tool_streak(call.tool_name)
    if count < cfg.unknown_tool_threshold:
        return None
    name = missing or call.tool_name
    return Detection(
        CRITICAL,
        "unknown_tool_repeat",
        count,
        f"CRITICAL: attempted unavailable tool {name} {count} times. "
        "Stop retrying that missing tool and answer without it.",
    )


def global_circuit_breaker(
    history: RunHistory, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    """No-progress breaker across detectors: identical-call streaks and stable ping-pong.

    The reference counted only the current tool's streak, so a ping-pong loop never tripped
    it; here the larger of the two no-progress counts is compared with the threshold.
    """
    streak, latest = history.no_progress_streak(call.sig)
    pong = history.ping_pong(call.sig)
    pong_count = pong.count if pong.no_progress else 0
    count = max(streak, pong_count)
    if count < cfg.global_circuit_breaker_threshold:
        return None
    if pong_count > streak:
        what = f"{call.tool_name} and {pong.paired_tool_name} have alternated"
    else:
        what = f"{call.tool_name} has repeated identical no-progress outcomes"
    return Detection(
        CRITICAL,
        "global_circuit_breaker",
        count,
        f"CRITICAL: {what} {count} times. "
        "Session execution stopped by global circuit breaker to prevent runaway loops.",
        latest or "",
        pong.paired_tool_name if pong_count > streak else "",
    )


def known_poll_no_progress(
    history: RunHistory, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    if not (call.known_poll and cfg.detectors.known_poll_no_progress):
        return None
    streak, latest = history.no_progress_streak(call.sig)
    if streak >= cfg.critical_threshold:
        return Detection(
            CRITICAL,
            "known_poll_no_progress",
            streak,
            f"CRITICAL: Called {call.tool_name} with identical arguments and no progress "
            f"{streak} times. This appears to be a stuck polling loop. "
            "Session execution blocked to prevent resource waste.",
            latest or "",
        )
    if streak >= cfg.warning_threshold:
        return Detection(
            WARNING,
            "known_poll_no_progress",
            streak,
            f"WARNING: You have called {call.tool_name} {streak} times with identical "
            "arguments and no progress. Stop polling and either (1) increase wait time "
            "between checks, or (2) report the task as failed if the process is stuck.",
            latest or "",
        )
    return None


def ping_pong(history: RunHistory, call: CurrentCall, cfg: LoopDetectionConfig) -> Detection | None:
    """A,B,A,B… : warn even if outputs change, block only when both sides are stable."""
    if not cfg.detectors.ping_pong:
        return None
    pong = history.ping_pong(call.sig)
    if pong.count >= cfg.critical_threshold and pong.no_progress:
        return Detection(
            CRITICAL,
            "ping_pong",
            pong.count,
            f"CRITICAL: You are alternating between repeated tool-call patterns "
            f"({pong.count} consecutive calls) with no progress. This appears to be a stuck "
            "ping-pong loop. Session execution blocked to prevent resource waste.",
            history.latest_result_hash(call.sig) or "",
            pong.paired_tool_name,
        )
    if pong.count >= cfg.warning_threshold:
        return Detection(
            WARNING,
            "ping_pong",
            pong.count,
            f"WARNING: You are alternating between repeated tool-call patterns "
            f"({pong.count} consecutive calls). This looks like a ping-pong loop; stop "
            "retrying and report the task as failed.",
            "",
            pong.paired_tool_name,
        )
    return None


def generic_repeat(
    history: RunHistory, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    """Same tool + args: warn on repeats in the window, block when outcomes are identical."""
    if call.known_poll or not cfg.detectors.generic_repeat:
        return None
    streak, latest = history.no_progress_streak(call.sig)
    if streak >= cfg.critical_threshold:
        return Detection(
            CRITICAL,
            "generic_repeat",
            streak,
            f"CRITICAL: Called {call.tool_name} with identical arguments and identical "
            f"outcomes {streak} times. Session execution blocked to prevent runaway loops.",
            latest or "",
        )
    recent = history.count(call.sig)
    if recent >= cfg.warning_threshold:
        return Detection(
            WARNING,
            "generic_repeat",
            recent,
            f"WARNING: You have called {call.tool_name} {recent} times with identical "
            "arguments. If this is not making progress, stop retrying and report the task "
            "as failed.",
        )
    return None


DETECTORS = (
    unknown_tool_repeat,
    global_circuit_breaker,
    known_poll_no_progress,
    ping_pong,
    generic_repeat,
)


def detect(history: RunHistory, call: CurrentCall, cfg: LoopDetectionConfig) -> Detection | None:
    """Run the detectors in order; ``None`` when the rolling detectors are off or all pass."""
    if not cfg.rolling_detectors_on:
        return None
    for detector in DETECTORS:
        hit = detector(history, call, cfg)
        if hit is not None:
            return hit
    return None
