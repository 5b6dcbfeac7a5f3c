"""The rolling-history loop detectors, checked in the reference order; the first hit wins.

Each detector looks at the run's history *before* the current call is recorded and at the
call about to happen, exactly like the reference runtime, so counts and thresholds mean the
same here as in the gateway's own documentation. :func:`detect` queries the history once per
fact and hands each detector the facts it needs.

One counting convention holds for every detector: a count is the number of *earlier* calls
(or outcomes) that form the pattern the current call continues, the current call never
included, and a detector fires when that count reaches its threshold. The reference counted
the current call in ping-pong only (one call earlier than its other detectors); here
:func:`pong_count` takes it back out, unless ``deviations.pingPongEarlierCalls`` is off.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.core.config import LoopDetectionConfig
from streams.core.history import RunHistory
from streams.core.ping_pong import PingPong

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


class CurrentCall:
    """The call about to happen (a slotted value, like hashing.Outcome)."""

    __slots__ = ("tool_name", "sig", "known_poll")

    def __init__(self, tool_name: str, sig: str, known_poll: bool) -> None:
        self.tool_name = tool_name
        self.sig = sig
        self.known_poll = known_poll


def unknown_tool_repeat(count: int, missing: str | None, call: CurrentCall) -> Detection:
    """Retries of a tool the gateway says does not exist; not governed by ``detectors``."""
    name = missing or call.tool_name
    return Detection(
        CRITICAL,
        "unknown_tool_repeat",
        count,
        f"CRITICAL: attempted unavailable tool {name} {count} times. "
        "Stop retrying that missing tool and answer without it.",
    )


def pong_count(pong: PingPong, earlier_only: bool = True) -> int:
    """Earlier calls of the alternation (``PingPong.calls`` includes the current one), or
    with the current one as the reference counts (``earlier_only`` false)."""
    if not earlier_only:
        return pong.calls
    return pong.calls - 1 if pong.calls else 0


def global_circuit_breaker(
    streak: int, latest: str | None, pong: PingPong, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    """No-progress breaker across detectors: identical-call streaks and stable ping-pong.

    The reference counted only the current tool's streak, so a ping-pong loop never tripped
    it; here the larger of the two no-progress counts is compared with the threshold
    (unless ``deviations.breakerCountsPingPong`` is off).
    """
    devs = cfg.deviations
    alternation = 0
    if pong.no_progress and devs.breaker_counts_ping_pong:
        alternation = pong_count(pong, devs.ping_pong_earlier_calls)
    count = max(streak, alternation)
    if count < cfg.global_circuit_breaker_threshold:
        return None
    if alternation > streak:
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
        pong.paired_tool_name if alternation > streak else "",
    )


def known_poll_no_progress(
    streak: int, latest: str | None, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
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


def ping_pong(
    pong: PingPong, history: RunHistory, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    """A,B,A,B… : warn even if outputs change, block only when both sides are stable."""
    count = pong_count(pong, cfg.deviations.ping_pong_earlier_calls)
    if count >= cfg.critical_threshold and pong.no_progress:
        return Detection(
            CRITICAL,
            "ping_pong",
            count,
            f"CRITICAL: You are alternating between repeated tool-call patterns "
            f"({count} consecutive calls) with no progress. This appears to be a stuck "
            "ping-pong loop. Session execution blocked to prevent resource waste.",
            history.latest_result_hash(call.sig) or "",
            pong.paired_tool_name,
        )
    if count >= cfg.warning_threshold:
        return Detection(
            WARNING,
            "ping_pong",
            count,
            f"WARNING: You are alternating between repeated tool-call patterns "
            f"({count} consecutive calls). This looks like a ping-pong loop; stop "
            "retrying and report the task as failed.",
            "",
            pong.paired_tool_name,
        )
    return None


def generic_repeat(
    streak: int, latest: str | None, recent: int, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    """Same tool + args: warn on repeats in the window, block when outcomes are identical."""
    if streak >= cfg.critical_threshold:
        return Detection(
            CRITICAL,
            "generic_repeat",
            streak,
            f"CRITICAL: Called {call.tool_name} with identical arguments and identical "
            f"outcomes {streak} times. Session execution blocked to prevent runaway loops.",
            latest or "",
        )
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


def detect(
    history: RunHistory, tool_name: str, sig: str, known_poll: bool, cfg: LoopDetectionConfig
) -> Detection | None:
    """Run the detectors in the reference order; ``None`` when they are off or all pass.

    The history is asked each question once, and the questions only some detectors need
    are asked only when those detectors are reached.
    """
    if cfg.enabled is not True:  # the rolling detectors need an explicit ``enabled: true``
        return None
    count, missing = history.unknown_tool_streak(tool_name)
    if count >= cfg.unknown_tool_threshold:
        return unknown_tool_repeat(count, missing, CurrentCall(tool_name, sig, known_poll))
    head = history.sig_last.get(sig)  # history.count(sig), inlined: on every call's path
    if head is None:
        # No earlier call with these args in the window: no streak, no repeat, and no
        # ping-pong (its expected next call is the one before the newest, so it is there);
        # with every threshold >= 1 (config validation) nothing below could fire.
        return None
    call = CurrentCall(tool_name, sig, known_poll)
    streak, latest = history.no_progress_streak(sig)
    pong = history.ping_pong(sig)
    switches = cfg.detectors
    return (
        global_circuit_breaker(streak, latest, pong, call, cfg)
        or (
            known_poll_no_progress(streak, latest, call, cfg)
            if call.known_poll and switches.known_poll_no_progress
            else None
        )
        or (ping_pong(pong, history, call, cfg) if switches.ping_pong else None)
        or (
            generic_repeat(streak, latest, head.sig_count, call, cfg)
            if not call.known_poll and switches.generic_repeat
            else None
        )
    )
