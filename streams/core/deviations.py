"""Switches for loopguard's deliberate deviations from the reference detector (issue 29).

Each row of the README's "Deliberate deviations from the reference" table can be switched off
one by one in ``deviations`` (``true``: loopguard's rule, the default; ``false``: what
OpenClaw's own detector does), and ``compat: "openclaw"`` switches every one of them off at
once, loopguard's own detectors (``detectors.consecutiveErrors``, ``errorRepeat``,
``compactionStorm``) and its rule across agents (``agentCycles.enabled``) included. A switch
set explicitly wins over ``compat``, so a fleet can move from the reference's verdicts to
loopguard's one rule at a time. The switches that change how results are hashed travel to
hashing.py as one bitmask (:data:`HashRules` bits), 0 being loopguard's rules, so the hot path
and its memo keys stay as they were by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.config_block import check_block
from streams.core.config_error import ConfigError

COMPAT = "compat"
DEVIATIONS = "deviations"
LOOPGUARD, OPENCLAW = "loopguard", "openclaw"
COMPAT_VALUES = (LOOPGUARD, OPENCLAW)

# ``deviations`` switch -> the row it belongs to (docs/openclaw-compat.md has the table).
SWITCHES: dict[str, str] = {
    "escalateBlocks": "repeated blocks abort the run (abortAfterBlocks); the breaker aborts",
    "breakerCountsPingPong": "the global breaker counts a stable ping-pong too",
    "vetoIsOutcome": "a loop veto is recorded as its call's outcome (repeating the last one)",
    "maskExecOutput": "exec output has datetimes, clock times, PIDs and durations masked",
    "updatePlanShape": "update_plan args and results are hashed by the plan's shape",
    "sendsByToolName": "*_send tools and *_message sends count as message sends",
    "resultArgsByCallId": "a result omitting its args is hashed with its call's args",
    "pingPongEarlierCalls": "ping-pong counts the alternating calls before the current one",
    "carryGuardCounts": "a compaction re-arming an open guard window keeps its counts",
    "resultToOpenCall": "a result with neither args nor call id answers its tool's open call",
    "bareResults": "a bare result object is its own details; a bare exec string its output",
    # issue 44 (call_identity.py, status_results.py)
    "ignoreExecutionKnobs": "exec's pty, timeout, yieldMs, background, title and process's "
    "poll timeout are left out of a call's identity",
    "maskStatusResults": "session_status results have relative times, counters and "
    "timestamps masked",
}
# loopguard's own detectors (``detectors.<name>``): deviations too, off under compat.
DETECTOR_SWITCHES = (
    "consecutiveErrors",
    "errorRepeat",
    "compactionStorm",
    "unchangedOutcome",  # issue 38: rules that see progress
    "repeatedCycle",
    "burstRepeat",  # issue 44 (bursts.py): one turn's parallel calls as a set
    "errorAcrossRuns",  # issue 44: the same failure run after run of a session
)

# Hashing bits: set = the reference's rule (0 = loopguard's rules, the default).
RAW_EXEC_OUTPUT = 1  # maskExecOutput: false
RAW_UPDATE_PLAN = 2  # updatePlanShape: false
BUILTIN_SENDS = 4  # sendsByToolName: false
WRAPPED_RESULTS = 8  # bareResults: false
RAW_CALL_ARGS = 16  # ignoreExecutionKnobs: false
RAW_STATUS_RESULTS = 32  # maskStatusResults: false (or a tool's ``statusResult: false``)
# Not a switch: set in a tool's view by ``perTool.<tool>.statusResult: true`` (config.tool_view).
STATUS_RESULT = 64


@dataclass(frozen=True, slots=True)
class Deviations:
    """Resolved switches: ``True`` is loopguard's rule, ``False`` the reference's."""

    escalate_blocks: bool = True
    breaker_counts_ping_pong: bool = True
    veto_is_outcome: bool = True
    mask_exec_output: bool = True
    update_plan_shape: bool = True
    sends_by_tool_name: bool = True
    result_args_by_call_id: bool = True
    ping_pong_earlier_calls: bool = True
    carry_guard_counts: bool = True
    result_to_open_call: bool = True
    bare_results: bool = True
    ignore_execution_knobs: bool = True
    mask_status_results: bool = True

    @property
    def hash_rules(self) -> int:
        """The hashing switches as hashing.py takes them (0: loopguard's rules)."""
        rules = 0
        if not self.mask_exec_output:
            rules |= RAW_EXEC_OUTPUT
        if not self.update_plan_shape:
            rules |= RAW_UPDATE_PLAN
        if not self.sends_by_tool_name:
            rules |= BUILTIN_SENDS
        if not self.bare_results:
            rules |= WRAPPED_RESULTS
        if not self.ignore_execution_knobs:
            rules |= RAW_CALL_ARGS
        if not self.mask_status_results:
            rules |= RAW_STATUS_RESULTS
        return rules


def check_compat(value: Any, where: str) -> None:
    if value not in COMPAT_VALUES:
        raise ConfigError(f'{where}: expected "loopguard" or "openclaw", got {value!r}')


def check_deviations(value: Any, where: str) -> None:
    check_block(value, where, SWITCHES, switches=SWITCHES)


def switch_default(compat: str) -> bool:
    """An unset switch: loopguard's rule, or the reference's under ``compat: "openclaw"``."""
    return compat != OPENCLAW


def own_detectors(merged: dict[str, Any], explicit: dict[str, Any], compat: str) -> dict[str, Any]:
    """``detectors`` (merged over the defaults) with loopguard's own rules that the block
    leaves unset (``explicit``: its own ``detectors``) following ``compat``: off under
    "openclaw" unless switched on."""
    out = dict(merged)
    default = switch_default(compat)
    for name in DETECTOR_SWITCHES:
        if name not in explicit:
            out[name] = default
    return out


def own_agent_cycles(block: dict[str, Any], compat: str) -> dict[str, Any]:
    """``agentCycles`` as the block sets it, ``enabled`` following ``compat`` when unset: the
    reference has no rule across agents, so under "openclaw" it is off unless switched on."""
    if "enabled" in block:
        return block
    return {**block, "enabled": switch_default(compat)}


def resolve_deviations(explicit: dict[str, Any], compat: str) -> Deviations:
    """The switches of a merged block: set ones as set, the rest from ``compat``."""
    default = switch_default(compat)

    def on(name: str) -> bool:
        value = explicit.get(name)
        return default if value is None else bool(value)

    return Deviations(
        escalate_blocks=on("escalateBlocks"),
        breaker_counts_ping_pong=on("breakerCountsPingPong"),
        veto_is_outcome=on("vetoIsOutcome"),
        mask_exec_output=on("maskExecOutput"),
        update_plan_shape=on("updatePlanShape"),
        sends_by_tool_name=on("sendsByToolName"),
        result_args_by_call_id=on("resultArgsByCallId"),
        ping_pong_earlier_calls=on("pingPongEarlierCalls"),
        carry_guard_counts=on("carryGuardCounts"),
        result_to_open_call=on("resultToOpenCall"),
        bare_results=on("bareResults"),
        ignore_execution_knobs=on("ignoreExecutionKnobs"),
        mask_status_results=on("maskStatusResults"),
    )


def switch_values(devs: Deviations) -> dict[str, bool]:
    """camelCase switch -> resolved value, in the table's order."""
    values = (
        devs.escalate_blocks,
        devs.breaker_counts_ping_pong,
        devs.veto_is_outcome,
        devs.mask_exec_output,
        devs.update_plan_shape,
        devs.sends_by_tool_name,
        devs.result_args_by_call_id,
        devs.ping_pong_earlier_calls,
        devs.carry_guard_counts,
        devs.result_to_open_call,
        devs.bare_results,
        devs.ignore_execution_knobs,
        devs.mask_status_results,
    )
    return dict(zip(SWITCHES, values, strict=True))


def canonical_deviations(devs: Deviations) -> dict[str, bool]:
    """The switches as they count for ``config_version``: only those off loopguard's default
    (so every config written before the switches existed keeps its version)."""
    return {name: value for name, value in switch_values(devs).items() if not value}
