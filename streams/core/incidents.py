"""Loop incidents (issue 28): one tool failing or looping the same way in many runs at once.

Pure and event-time based, so the worker (streams/worker/incidents.py, Faust tables) and
replay (streams/replay/incidents.py, plain dicts) run the same steps and reach the same
incidents from the same events.

- A **signal** is a failed tool outcome (signed by the tool and its normalised error), a loop
  between agents (signed by the cycle of agents, :mod:`streams.core.agent_cycles`) or another
  loop decision on a call that did not fail (signed by the tool and the call's args hash; a
  decision on a failing call is left to its failures, so one broken tool is one signature).
- Signals are counted per **signature** in tumbling windows of ``windowSeconds`` (event time):
  the distinct runs and agents. A window whose counts reach ``minRuns`` and ``minAgents`` opens
  an incident, with an id derived from the signature and the window's start.
- The incident stays open while each following window has a signal of its signature (a
  record says so once per window: the audit trail knows when it went quiet), and closes at
  the end of the first quiet window (``closes_at``).
- Every incident has a human label (:attr:`Incident.label`): what fails, what repeats, or
  which agents pass the same messages round.

Order: counts are sets, so within a window the order of signals never changes what opens or
which runs an incident spans; only when it is noticed. Across windows signals are taken in
the order they come (replay: event time, decisions after the failure that caused them); a
signal later than ``closes_at`` of an incident it would have kept open arrives after the
close and opens a new incident if its own window crosses the thresholds.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from streams.core.agent_cycles import CYCLE_SEP, cycle_id
from streams.core.agent_cycles import DETECTOR as AGENT_CYCLE
from streams.core.events import Decision, ToolResult
from streams.core.failures import ERROR_HASH_PREFIX
from streams.core.incident_config import IncidentConfig

ERROR, ARGS, CYCLE = "error", "args", "cycle"
OPEN, CLOSED = "open", "closed"
MAX_MEMBERS = 1000  # distinct runs (and agents) kept per window and per incident
KEPT_WINDOWS = 3  # a signature's windows counted, its newest one included
MAX_ERROR_TEXT = 200
# Failure-based detectors: their decisions are signed by the failures they saw.
FAILURE_DETECTORS = frozenset({"consecutive_errors", "error_repeat", "unknown_tool"})

# Most specific first: a timestamp holds numbers, a path may hold hex.
_NORMALISERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(z|[+-]\d{2}:?\d{2})?"), "<ts>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b"), "<ts>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<id>"),
    (re.compile(r"[a-z][a-z0-9+.-]*://\S+"), "<url>"),
    (re.compile(r"(?:[a-z]:)?(?:[\\/][\w.@~-]+){2,}[\\/]?"), "<path>"),
    (re.compile(r"\b(?:0x)?(?=[0-9a-f]*\d)[0-9a-f]{6,}\b"), "<hex>"),
    (re.compile(r"\b\d+(?:\.\d+)?\b"), "<n>"),
    (re.compile(r"\b(?=[\w-]*\d)[\w-]+"), "<id>"),  # any other word with a digit in it
    (re.compile(r"\s+"), " "),
)


def normalise_error(text: str) -> str:
    """An error message with what differs between occurrences of one failure replaced:
    lowercased; timestamps ``<ts>``, UUIDs ``<id>``, URLs ``<url>``, paths ``<path>``, hex
    strings ``<hex>``, numbers ``<n>``, any other word holding a digit ``<id>``; whitespace
    collapsed; at most 200 characters."""
    out = text.lower()
    for pattern, placeholder in _NORMALISERS:
        out = pattern.sub(placeholder, out)
    return out.strip()[:MAX_ERROR_TEXT]


@dataclass(frozen=True, slots=True)
class Signal:
    """One sign of trouble: a run of an agent hit ``tool`` with ``detail`` at ``event_time``."""

    tool: str
    kind: str  # ERROR (detail: the normalised error), CYCLE (the agents), ARGS (the args hash)
    detail: str
    run_id: str
    agent_id: str
    event_time: int  # epoch ms

    @property
    def signature(self) -> str:
        return signature_key(self.tool, self.kind, self.detail)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "kind": self.kind,
            "detail": self.detail,
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "event_time": self.event_time,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Signal:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


def signature_key(tool: str, kind: str, detail: str) -> str:
    """A signature's key (the signals topic's message key): 16 hex digits."""
    text = f"{tool}\x1f{kind}\x1f{detail}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def incident_id(signature: str, window_start: int) -> str:
    """Deterministic: the same signature crossing in the same window is the same incident."""
    return "inc-" + hashlib.sha256(f"{signature}@{window_start}".encode()).hexdigest()[:16]


def failure_signal(event: ToolResult) -> Signal | None:
    """The signal of a failed tool result (``error`` set), else ``None``."""
    if event.error is None:
        return None
    env = event.envelope
    return Signal(
        event.tool_name,
        ERROR,
        normalise_error(event.error),
        env.run_id,
        env.agent_id,
        env.event_time,
    )


def decision_signal(decision: Decision) -> Signal | None:
    """The signal of a loop decision on a call that did not fail, else ``None`` (a failing
    call's incident is signed by its failures; a decision without args hash signs nothing).
    A loop between agents is signed by its cycle, so every run of it counts under one."""
    if decision.detector == AGENT_CYCLE and (agents := cycle_agents(decision)):
        return Signal(
            decision.tool_name,
            CYCLE,
            cycle_id(agents),
            decision.run_id,
            decision.agent_id,
            decision.event_time,
        )
    failing = decision.result_hash.startswith(ERROR_HASH_PREFIX) or decision.error_code
    if failing or decision.detector in FAILURE_DETECTORS or not decision.args_hash:
        return None
    if not decision.tool_name:
        return None
    return Signal(
        decision.tool_name,
        ARGS,
        decision.args_hash,
        decision.run_id,
        decision.agent_id,
        decision.event_time,
    )


def cycle_agents(decision: Decision) -> list[str]:
    """The agents of an agent-cycle decision's loop (its ``agents`` extra), [] if unreadable."""
    try:
        agents = json.loads(decision.extra.get("agents", "[]"))
    except (TypeError, ValueError):
        return []
    if not isinstance(agents, list) or not all(isinstance(a, str) for a in agents):
        return []
    return agents


def window_start(event_time: int, window_ms: int) -> int:
    return event_time - event_time % window_ms


def _add(members: tuple[str, ...], item: str) -> tuple[str, ...]:
    if item in members or len(members) >= MAX_MEMBERS:
        return members
    return tuple(sorted((*members, item)))


@dataclass(frozen=True, slots=True)
class WindowTally:
    """A signature's distinct runs and agents within one window (the windowed table's value)."""

    runs: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()

    def add(self, signal: Signal) -> WindowTally:
        return WindowTally(_add(self.runs, signal.run_id), _add(self.agents, signal.agent_id))

    def crosses(self, config: IncidentConfig) -> bool:
        return len(self.runs) >= config.min_runs and len(self.agents) >= config.min_agents

    def to_dict(self) -> dict[str, Any]:
        return {"runs": list(self.runs), "agents": list(self.agents)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> WindowTally:
        if not data:
            return cls()
        return cls(tuple(data["runs"]), tuple(data["agents"]))


@dataclass(slots=True)
class SignatureTallies:
    """A signature's tallies of its newest windows (``KEPT_WINDOWS`` of them: a signal that
    late still counts in its own window), in a form that serialises as JSON: what the worker
    keeps per signature, and replay too."""

    window_ms: int = 0
    windows: dict[int, WindowTally] = field(default_factory=dict)

    def add(self, signal: Signal, window_ms: int) -> WindowTally:
        """Count ``signal`` in its window; the window's tally with it."""
        if window_ms != self.window_ms:  # windowSeconds changed at run time: start afresh
            self.window_ms, self.windows = window_ms, {}
        start = window_start(signal.event_time, window_ms)
        tally = self.windows[start] = self.windows.get(start, WindowTally()).add(signal)
        oldest = max(self.windows) - (KEPT_WINDOWS - 1) * window_ms
        for gone in [w for w in self.windows if w < oldest]:
            del self.windows[gone]
        return tally

    def newest(self) -> int:
        """Start of the newest window counted (epoch ms), 0 with none."""
        return max(self.windows, default=0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_ms": self.window_ms,
            "windows": [[w, *t.to_dict().values()] for w, t in sorted(self.windows.items())],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SignatureTallies:
        if not data:
            return cls()
        windows = {
            int(row[0]): WindowTally(tuple(row[1]), tuple(row[2])) for row in data["windows"]
        }
        return cls(int(data["window_ms"]), windows)


@dataclass(frozen=True, slots=True)
class Incident:
    """An incident as published, stored and shown; ``status`` OPEN or CLOSED."""

    incident_id: str
    signature: str
    tool: str
    kind: str
    detail: str
    status: str
    window_seconds: int
    opened_at: int  # start of the window that crossed the thresholds, epoch ms
    last_window: int  # start of the latest window with a signal
    closed_at: int | None = None  # end of the first quiet window, once closed
    runs: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()

    @property
    def closes_at(self) -> int:
        """End of the first window after ``last_window``: closed then unless it has a signal."""
        return self.last_window + 2 * self.window_seconds * 1000

    @property
    def label(self) -> str:
        """What the incident is about, in words (the signature's detail is a key, and for a
        repeated call only a hash)."""
        if self.kind == ERROR:
            return f"{self.tool} fails: {self.detail}"
        if self.kind == CYCLE:
            first = self.detail.split(CYCLE_SEP, 1)[0]
            return f"agents {self.detail}{CYCLE_SEP}{first} pass the same messages round"
        short = self.detail.rsplit(":", 1)[-1][:12]
        return f"{self.tool} called again and again with the same args ({short})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "incident_id": self.incident_id,
            "signature": self.signature,
            "tool": self.tool,
            "kind": self.kind,
            "detail": self.detail,
            "status": self.status,
            "window_seconds": self.window_seconds,
            "opened_at": self.opened_at,
            "last_window": self.last_window,
            "closed_at": self.closed_at,
            "runs": list(self.runs),
            "agents": list(self.agents),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Incident:
        values = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        values["runs"] = tuple(values.get("runs", ()))
        values["agents"] = tuple(values.get("agents", ()))
        return cls(**values)


def merge_members(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(set(a) | set(b)))[:MAX_MEMBERS]


@dataclass(slots=True)
class Step:
    """What one signal did: the signature's open incident after it, and the records to
    publish (a close of an incident it came too late for, an open, or an update)."""

    open: Incident | None
    published: list[Incident] = field(default_factory=list)


def close(incident: Incident) -> Incident:
    return replace(incident, status=CLOSED, closed_at=incident.closes_at)


def apply_signal(
    current: Incident | None, tally: WindowTally, signal: Signal, config: IncidentConfig
) -> Step:
    """One signal's effect on its signature, given the signature's open incident (``current``)
    and the signal's window tally *with the signal added*. Pure; the caller stores both."""
    start = window_start(signal.event_time, config.window_ms)
    step = Step(current)
    if current is not None and start >= current.closes_at:
        step.published.append(close(current))  # a quiet window passed before this signal
        step.open = current = None
    if current is None:
        if tally.crosses(config):
            opened = Incident(
                incident_id=incident_id(signal.signature, start),
                signature=signal.signature,
                tool=signal.tool,
                kind=signal.kind,
                detail=signal.detail,
                status=OPEN,
                window_seconds=config.window_seconds,
                opened_at=start,
                last_window=start,
                runs=tally.runs,
                agents=tally.agents,
            )
            step.open = opened
            step.published.append(opened)
        return step
    if start < current.opened_at:
        return step  # a late signal from before the incident: counted in its window only
    runs = merge_members(current.runs, (signal.run_id,))
    agents = merge_members(current.agents, (signal.agent_id,))
    last = max(current.last_window, start)
    if (runs, agents, last) == (current.runs, current.agents, current.last_window):
        return step
    step.open = replace(current, runs=runs, agents=agents, last_window=last)
    step.published.append(step.open)  # the runs it spans grew, or it goes on in a new window
    return step


def observe_signal(
    tallies: SignatureTallies, current: Incident | None, signal: Signal, config: IncidentConfig
) -> Step:
    """One signal counted in its signature's ``tallies`` (changed in place) and applied to
    the signature's open incident (``current``): the one step the worker and replay take."""
    return apply_signal(current, tallies.add(signal, config.window_ms), signal, config)


def due_to_close(current: Incident, now: int) -> bool:
    """Whether ``now`` (event time or wall clock, epoch ms) is past the quiet window."""
    return now >= current.closes_at


class IncidentBook:
    """Every signature's tallies and open incident in plain dicts: replay's worker, and the
    reference the Faust agent's tables are checked against."""

    def __init__(self, config: IncidentConfig) -> None:
        self.config = config
        self.tallies: dict[str, SignatureTallies] = {}
        self.open: dict[str, Incident] = {}
        self.published: list[Incident] = []

    def observe(self, signal: Signal) -> list[Incident]:
        if not self.config.enabled:
            return []
        tallies = self.tallies.setdefault(signal.signature, SignatureTallies())
        step = observe_signal(tallies, self.open.get(signal.signature), signal, self.config)
        if step.open is None:
            self.open.pop(signal.signature, None)
        else:
            self.open[signal.signature] = step.open
        self.published.extend(step.published)
        return step.published

    def close_due(self, now: int) -> list[Incident]:
        """Close every open incident whose quiet window ended by ``now``."""
        closed = [close(i) for i in self.open.values() if due_to_close(i, now)]
        for incident in closed:
            del self.open[incident.signature]
        self.published.extend(closed)
        return closed

    def incidents(self) -> list[Incident]:
        """The latest record of every incident, by opening time then id."""
        latest: dict[str, Incident] = {}
        for record in self.published:
            latest[record.incident_id] = record
        return sorted(latest.values(), key=lambda i: (i.opened_at, i.incident_id))
