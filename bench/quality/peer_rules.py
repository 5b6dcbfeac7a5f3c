"""The peers' published tool-loop rules, re-implemented for the benchmark only (never the
product), each from its own source, so that they can be scored on the same events as loopguard.

Each rule is a small class with one method, :meth:`see`, fed a run's calls and results in the
order they happened; it answers :data:`NONE`, a warning, a block (the call is refused and the
run goes on) or an abort (the run stops). A stop answered on a :class:`PeerCall` refuses that
call; one answered on a :class:`PeerResult` stops the run before its next call. One instance
serves one run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol


class Level(IntEnum):
    """What a rule answers, ordered by severity (block and abort are both stops)."""

    NONE = 0
    WARN = 1
    BLOCK = 2
    ABORT = 3


@dataclass(frozen=True)
class Answer:
    level: Level
    rule: str = ""  # which of the peer's scenarios answered


NONE = Answer(Level.NONE)


@dataclass(frozen=True)
class PeerCall:
    """The agent asked for a tool, before it runs."""

    tool: str
    args: str  # JSON text


@dataclass(frozen=True)
class PeerResult:
    """A tool finished: its call's args, the result (JSON text) or the error it failed with."""

    tool: str
    args: str
    output: str | None = None
    error: str | None = None


PeerEvent = PeerCall | PeerResult


class PeerRule(Protocol):
    label: str

    def see(self, event: PeerEvent) -> Answer: ...


def parsed(text: str | None) -> Any:
    """JSON text as a value; text that is no JSON stays the string it is."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def sorted_json(text: str) -> str:
    """Keys sorted at every level: safe-stable-stringify (Roo Code), Cline's sortKeys."""
    return json.dumps(parsed(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def ordered_json(text: str) -> str:
    """Keys in the order written: what JavaScript's ``JSON.stringify`` compares (Gemini CLI)."""
    return json.dumps(parsed(text), separators=(",", ":"), ensure_ascii=False)


class RooCodeRepetition:
    """Roo Code's ``ToolRepetitionDetector`` (``src/core/tools/ToolRepetitionDetector.ts``),
    limit ``DEFAULT_CONSECUTIVE_MISTAKE_LIMIT = 3`` (``packages/types/src/provider-settings.ts``).

    The count starts at 0 on a call unlike the one before (name and params, keys sorted) and
    grows by one per identical call; at the limit (the 4th identical call in a row) the call is
    not executed and the task asks the user (``mistake_limit_reached``): an unattended run
    stops there. Results play no part.
    """

    label = "Roo Code: 4th identical call in a row"

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self.previous: str | None = None
        self.count = 0

    def see(self, event: PeerEvent) -> Answer:
        if not isinstance(event, PeerCall):
            return NONE
        key = json.dumps([event.tool, sorted_json(event.args)])
        if key == self.previous:
            self.count += 1
        else:
            self.count, self.previous = 0, key
        if self.limit > 0 and self.count >= self.limit:
            self.count, self.previous = 0, None  # Roo resets, so a user can guide it past
            return Answer(Level.ABORT, "tool_repetition_limit")
        return NONE


class GeminiCliToolLoop:
    """Gemini CLI's tool-call loop check (``packages/core/src/services/loopDetectionService.ts``,
    ``TOOL_CALL_LOOP_THRESHOLD = 5``; ``packages/core/src/core/client.ts`` acts on it).

    Each call's key is its name and ``JSON.stringify(args)``. Since v0.53.0 (commit acae7124,
    "mitigate infinite ReAct loops") a loop is the last 5 x k keys repeating one cycle of k
    calls, k from 1 to 5; before it, 5 identical calls in a row (``max_cycle=1``). The first
    loop found refuses the call that completes it and tells the model to step back (a block);
    the key history is kept, and the next loop found ends the turn (``LoopDetected``).
    Left out: the content-chanting check (streamed text, not tool calls) and the LLM-judged
    check after 30 turns (it asks a model).
    """

    label = "Gemini CLI: a cycle of 1-5 calls 5 times"
    THRESHOLD = 5

    def __init__(self, max_cycle: int = 5) -> None:
        self.max_cycle = max_cycle
        self.history: list[str] = []
        self.detected = 0

    def see(self, event: PeerEvent) -> Answer:
        if not isinstance(event, PeerCall):
            return NONE
        self.history.append(json.dumps([event.tool, ordered_json(event.args)]))
        del self.history[: -self.THRESHOLD * self.max_cycle]
        if not self.repeats_a_cycle():
            return NONE
        self.detected += 1
        level = Level.BLOCK if self.detected == 1 else Level.ABORT
        return Answer(level, "consecutive_identical_tool_calls")

    def repeats_a_cycle(self) -> bool:
        keys = self.history
        for k in range(1, self.max_cycle + 1):
            span = k * self.THRESHOLD
            if len(keys) >= span and all(keys[-span + i] == keys[-k + i % k] for i in range(span)):
                return True
        return False


class ClineRepetition:
    """Cline's repeated-tool-call detection (PR #9933, commit f3a3f30d:
    ``src/core/task/loop-detection.ts``, ``LOOP_DETECTION_SOFT_THRESHOLD = 3``,
    ``LOOP_DETECTION_HARD_THRESHOLD = 5``; today ``sdk/packages/core/src/runtime/safety/
    loop-detection.ts``, ``softThreshold: 3, hardThreshold: 5``).

    Identical means the same tool and params (keys sorted, ``task_progress`` dropped). The
    check runs once the call has executed: the 3rd identical call in a row gets a warning
    appended, the 5th runs and then escalates to the mistake limit, which asks the user or, in
    YOLO mode, fails the task: the run stops before its next call.
    """

    label = "Cline: warn at 3, stop at 5 identical"
    IGNORED_PARAMS = frozenset({"task_progress"})

    def __init__(self, soft: int = 3, hard: int = 5) -> None:
        self.soft, self.hard = soft, hard
        self.previous: tuple[str, str] | None = None
        self.count = 0

    def see(self, event: PeerEvent) -> Answer:
        if not isinstance(event, PeerResult):
            return NONE
        params = parsed(event.args)
        if isinstance(params, dict):
            params = {k: v for k, v in params.items() if k not in self.IGNORED_PARAMS}
        key = (event.tool, json.dumps(params, sort_keys=True, ensure_ascii=False))
        self.count = self.count + 1 if key == self.previous else 1
        self.previous = key
        if self.count >= self.hard:
            return Answer(Level.ABORT, "repeated_tool_call")
        if self.count == self.soft:
            return Answer(Level.WARN, "repeated_tool_call")
        return NONE


def exit_code(output: str | None) -> Any:
    """A shell result's exit code (OpenClaw's exec: ``details.exitCode``), else its status."""
    value = parsed(output)
    details = value.get("details") if isinstance(value, dict) else None
    if not isinstance(details, dict):
        return None
    return details.get("exitCode", details.get("status"))


class OpenHandsStuck:
    """OpenHands' ``StuckDetector`` (``openhands/controller/stuck.py``), checked before every
    agent step in headless mode, i.e. after each observation; a loop raises
    ``AgentStuckInLoopError`` and the run ends.

    Kept, its scenarios that apply to tool calls: (1) the last 4 actions identical and the
    last 4 observations identical; (2) the last 3 actions identical and the last 3
    observations errors; (4) the last 6 actions and observations alternating A, B, A, B, A, B.
    As ``_eq_no_pid`` does, two shell results are equal when their exit codes are (the output
    is not compared); others compare their content, errors their message.
    Left out: (3) the monologue (agent messages, which the events do not carry), (5) 10
    condensations in a row (context management, no tool call), and scenario 2's Jupyter
    syntax-error variant (IPython cells). Actions compare by tool and args only: OpenHands'
    dataclass equality also compares the model's ``thought``, which the events do not carry,
    so this fires at least as often as OpenHands would.
    """

    label = "OpenHands StuckDetector"
    KEPT = 6  # the longest look back (scenario 4)

    def __init__(self) -> None:
        self.actions: list[tuple[str, str]] = []
        self.observations: list[tuple[str, Any]] = []

    def see(self, event: PeerEvent) -> Answer:
        if isinstance(event, PeerCall):
            self.actions = [*self.actions[1 - self.KEPT :], (event.tool, sorted_json(event.args))]
            return NONE
        self.observations = [*self.observations[1 - self.KEPT :], self.observation(event)]
        rule = self.stuck()
        return Answer(Level.ABORT, rule) if rule else NONE

    @staticmethod
    def observation(event: PeerResult) -> tuple[str, Any]:
        if event.error is not None:
            return ("error", event.error)
        if event.tool == "exec":
            return ("command", exit_code(event.output))
        return ("output", sorted_json(event.output) if event.output is not None else None)

    def stuck(self) -> str:
        acts, obs = self.actions[::-1], self.observations[::-1]  # newest first, as OpenHands
        if len(acts) >= 4 and len(obs) >= 4 and same(acts[:4]) and same(obs[:4]):
            return "repeating_action_observation"
        errors = [kind == "error" for kind, _ in obs[:3]]
        if len(acts) >= 3 and len(errors) == 3 and same(acts[:3]) and all(errors):
            return "repeating_action_error"
        if len(acts) >= 6 and len(obs) >= 6 and alternating(acts) and alternating(obs):
            return "repeating_action_observation_pattern"
        return ""


def same(items: list[Any]) -> bool:
    return all(item == items[0] for item in items)


def alternating(items: list[Any]) -> bool:
    """The newest six: 0 == 2 == 4 and 1 == 3 == 5 (OpenHands' scenario 4)."""
    return same(items[0:6:2]) and same(items[1:6:2])


PEERS: dict[str, Callable[[], PeerRule]] = {
    "openhands": OpenHandsStuck,
    "roo-code": RooCodeRepetition,
    "gemini-cli": GeminiCliToolLoop,
    "cline": ClineRepetition,
}
