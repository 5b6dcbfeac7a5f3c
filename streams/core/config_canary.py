"""Whether a config change weakens guarding, judged by its effect (issue 40).

Field names cannot tell: ``enabled: false`` and ``mode: "observe"`` say so, but every detector
switched off, thresholds at 99999, ``historySize: 1`` or ``compat: "openclaw"`` switch a fleet's
guard off just as well. So a canonical set of loops, one per detector family, is played
through the core (:class:`streams.core.engine.LoopGuard`) under the config before a change and
under the config after it, as a gateway plays them (a blocked call answered with the loop veto,
the run stopped at an abort); a loop that was stopped (an enforced block or abort) before and
is no longer stopped after means the change weakens guarding.

Pure core: the config follower (streams.kafka.config_topic) and ``loopguard config set`` call
:func:`weakened_loops`; a play takes about a millisecond per loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from streams.core.config import LoopDetectionConfig
from streams.core.engine import LoopGuard
from streams.core.events import (
    Action,
    AgentEvent,
    CompactionRetry,
    Envelope,
    RunStarted,
    ToolCall,
    ToolResult,
)

CANARY_AGENT = "loopguard-config-canary"
# The gateway's answer to a blocked call, as the OpenClaw plugin sends it.
VETO = json.dumps({"details": {"status": "blocked", "deniedReason": "tool-loop"}})
# How many calls each loop makes at most: past every default threshold (the breaker's 30
# identical calls, abortAfterBlocks' three blocks after the first one), so a change that
# only delays the stop is not counted as a weakening; one that never stops the loop is.
LOOP_CALLS = 60


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a canary loop: a tool call and its outcome, or a compaction retry."""

    tool: str = ""
    args: str = "{}"
    result: str | None = None
    error: str | None = None
    compaction: bool = False
    turn: str | None = None  # the assistant turn of a parallel call (burstRepeat)


def _text(text: str, **details: object) -> str:
    return json.dumps({"content": [{"type": "text", "text": text}], "details": details})


def _args(**values: object) -> str:
    return json.dumps(values, sort_keys=True)


def identical_calls() -> list[Step]:
    """The same call with the same result, over and over (genericRepeat, the breaker)."""
    return [Step("read_file", _args(path="config.yaml"), _text("db: null"))] * LOOP_CALLS


def known_poll() -> list[Step]:
    """Polling a background process that never changes (knownPollNoProgress)."""
    poll = Step("process", _args(action="poll", sessionId="canary-1"), _text("", status="running"))
    return [poll] * LOOP_CALLS


def ping_pong() -> list[Step]:
    """Two calls in alternation, neither making progress (pingPong)."""
    read = Step("read_file", _args(path="config.yaml"), _text("db: null"))
    build = Step("exec", _args(command="make build"), _text("error: missing key", exitCode=2))
    return [read if i % 2 == 0 else build for i in range(LOOP_CALLS)]


def unchanged_outcome() -> list[Step]:
    """The same check with the same outcome, a different call between each (unchangedOutcome)."""
    steps = []
    for i in range(LOOP_CALLS // 2):
        steps.append(Step("exec", _args(command="pytest -x"), _text("1 failed", exitCode=1)))
        steps.append(Step("read_file", _args(path=f"src/m{i}.py"), _text(f"code {i}")))
    return steps


def repeated_cycle() -> list[Step]:
    """A three-call round repeated unchanged (repeatedCycle)."""
    rounds = (
        Step("web_search", _args(q="quarterly report"), _text("3 results")),
        Step("web_fetch", _args(url="https://example.invalid/r"), _text("page 1")),
        Step("write_file", _args(path="notes.md"), _text("written")),
    )
    return [rounds[i % 3] for i in range(LOOP_CALLS)]


def error_repeat() -> list[Step]:
    """The same call failing with the same error (errorRepeat, consecutiveErrors)."""
    push = Step("git_push", _args(remote="origin", branch="main"), None, "rejected: non-ff")
    return [push] * LOOP_CALLS


def consecutive_errors() -> list[Step]:
    """Every call different, every one failing (consecutiveErrors)."""
    return [
        Step("exec", _args(command=f"deploy --try {i}"), None, f"region eu-{i} refused")
        for i in range(LOOP_CALLS)
    ]


def compaction_loop() -> list[Step]:
    """A compaction, then the same call with the same result (post-compaction guard)."""
    fetch = Step("web_fetch", _args(url="https://example.invalid/a"), _text("timeout"))
    return [Step(compaction=True), *[fetch] * 10]


def compaction_storm() -> list[Step]:
    """Compaction after compaction, each retry redoing a call it made (compactionStorm)."""
    search = Step("web_search", _args(q="report"), _text("3 results"))
    fetch = Step("web_fetch", _args(url="https://example.invalid/r"), _text("page 1"))
    steps = [search, fetch]
    for i in range(10):
        steps += [Step(compaction=True), fetch if i % 2 == 0 else search]
    return steps


def burst_repeat() -> list[Step]:
    """One assistant turn's parallel calls cycling over three URLs (burstRepeat)."""
    urls = [f"https://example.invalid/{n}" for n in range(3)]
    return [
        Step("web_fetch", _args(url=urls[i % 3]), _text(f"page {i % 3}"), turn="turn-1")
        for i in range(LOOP_CALLS)
    ]


# The canonical loops by name; each name says what the loop is, not which field guards it.
LOOPS: dict[str, Callable[[], list[Step]]] = {
    "identical calls": identical_calls,
    "known poll": known_poll,
    "ping-pong": ping_pong,
    "unchanged outcome": unchanged_outcome,
    "repeated cycle": repeated_cycle,
    "error repeat": error_repeat,
    "consecutive errors": consecutive_errors,
    "compaction loop": compaction_loop,
    "compaction storm": compaction_storm,
    "burst repeat": burst_repeat,
}


@dataclass(frozen=True, slots=True)
class Stop:
    """Where a loop was first stopped: the call's number in the loop and the decision."""

    call: int
    action: str
    detector: str


def play(steps: list[Step], cfg: LoopDetectionConfig, name: str = "loop") -> Stop | None:
    """Play one loop under ``cfg`` as a gateway would; the first enforced block or abort."""
    guard = LoopGuard(configs=lambda _agent: cfg)
    seq = 0
    calls = 0
    first: Stop | None = None

    def envelope() -> Envelope:
        nonlocal seq
        seq += 1
        return Envelope(f"canary-{name}", CANARY_AGENT, "canary", seq, 1_700_000_000_000 + seq)

    def feed(event: AgentEvent) -> Action | None:
        nonlocal first
        stopped: Action | None = None
        for decision in guard.process(event):
            if decision.enforced and decision.action in (Action.BLOCK, Action.ABORT):
                if first is None:
                    first = Stop(calls, decision.action.value, decision.detector)
                if stopped is not Action.ABORT:
                    stopped = decision.action
        return stopped

    feed(RunStarted(envelope(), "user"))
    for step in steps:
        if step.compaction:
            if feed(CompactionRetry(envelope(), "context_overflow")) is Action.ABORT:
                break
            continue
        calls += 1
        verdict = feed(ToolCall(envelope(), step.tool, step.args, turn_id=step.turn))
        if verdict is Action.ABORT:
            break
        if verdict is Action.BLOCK:
            outcome = feed(ToolResult(envelope(), step.tool, step.args, VETO))
        else:
            outcome = feed(ToolResult(envelope(), step.tool, step.args, step.result, step.error))
        if outcome is Action.ABORT:
            break
    return first


def stops(cfg: LoopDetectionConfig) -> dict[str, Stop | None]:
    """Where each canonical loop is first stopped under ``cfg`` (None: never)."""
    return {name: play(build(), cfg, name) for name, build in LOOPS.items()}


# Loops replayed with a tool of ``perTool`` in place of their first call's tool: an entry
# can exempt its tool from detectors or raise its thresholds, which the loops' own tools
# would not show. (The poll loop is left out: only ``process`` and ``command_status`` poll.)
TOOL_LOOPS = ("identical calls", "ping-pong", "unchanged outcome", "error repeat")
# Tools probed at most per change, one per distinct way its entry changed (thresholds and
# exemptions before -> after): a table of 3,300 tools has a handful of distinct entries.
MAX_TOOL_PROBES = 32


def _tool_key(cfg: LoopDetectionConfig, tool: str) -> tuple[int, int, frozenset[str], int]:
    view = cfg.per_tool.get(tool, cfg)
    exempt = view.exempt if view is not cfg else frozenset()
    return (view.warning_threshold, view.critical_threshold, exempt, view.hash_rules)


def probe_tools(before: LoopDetectionConfig, after: LoopDetectionConfig) -> list[str]:
    """One tool for each distinct change of a ``perTool`` entry between the two configs
    (at most MAX_TOOL_PROBES, the tools whose change is shared by most tools first)."""
    groups: dict[tuple[object, ...], list[str]] = {}
    for tool in sorted({*before.per_tool, *after.per_tool}):
        was, now = _tool_key(before, tool), _tool_key(after, tool)
        if was != now:
            groups.setdefault((was, now), []).append(tool)
    ranked = sorted(groups.values(), key=lambda tools: -len(tools))
    return [tools[0] for tools in ranked[:MAX_TOOL_PROBES]]


def _as_tool(steps: list[Step], tool: str) -> list[Step]:
    subject = next(step.tool for step in steps if step.tool)
    return [replace(step, tool=tool) if step.tool == subject else step for step in steps]


def weakened_loops(before: LoopDetectionConfig, after: LoopDetectionConfig) -> list[str]:
    """The canonical loops stopped under ``before`` and no longer under ``after``, one phrase
    each (``identical calls (was blocked at call 21 by generic_repeat)``), then the same
    loops made with a ``perTool`` tool whose entry changed; empty when the change weakens
    nothing the loops show."""
    if before.version == after.version:
        return []  # the same config: mode, perTool and every rule are in the version
    lost = []
    for name, build in LOOPS.items():
        was = play(build(), before, name)
        if was is not None and play(build(), after, name) is None:
            lost.append(f"{name} (was {was.action}ed at call {was.call} by {was.detector})")
    for tool in probe_tools(before, after):
        for name in TOOL_LOOPS:
            steps = _as_tool(LOOPS[name](), tool)
            was = play(steps, before, name)
            if was is not None and play(steps, after, name) is None:
                lost.append(
                    f"{name} of {tool} (was {was.action}ed at call {was.call} by {was.detector})"
                )
    return lost


def weakening(before: LoopDetectionConfig, after: LoopDetectionConfig) -> str:
    """One line for the log, the audit trail and the webhook; empty when not weakened."""
    lost = weakened_loops(before, after)
    if not lost:
        return ""
    return f"no longer stopped: {', '.join(lost)}"
