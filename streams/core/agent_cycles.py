"""Loops between agents (issue 28): agent-to-agent sends form a graph, and a cycle of agents
whose sends carry the same messages round and round warns, then blocks, every run of it.

Each run of such a loop looks healthy on its own (openclaw#37842: 9 agents, 398
``sessions_send`` calls in 10 hours, a triangle the per-session ping-pong limit never saw), so
the graph is kept per *cycle key* (the chain id a gateway attached, else the gateway), on one
partition, from the send calls of every run. A send is an edge sender agent -> target (read
from OpenClaw's args, :func:`send_target`); an edge counts its sends in a row with the same
message (canonical.digest of the text); a cycle has gone round with no progress as many times
as its least repeated edge. Progress is any edge carrying another message: its count starts
again at 1. Pure and deterministic: event time only, no Kafka, no clock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.core.canonical import digest, parse_json
from streams.core.config import LoopDetectionConfig
from streams.core.decisions import build_decision
from streams.core.detectors import CRITICAL, WARNING
from streams.core.events import Action, AgentEvent, Decision, Envelope, ToolCall

DETECTOR = "agent_cycle"
# OpenClaw's agent-to-agent tools (src/agents/tools/sessions-send-tool.ts, conversation tools).
SESSIONS_SEND = "sessions_send"
CONVERSATION_TOOLS = ("conversations_send", "conversations_turn")
SEND_TOOLS = frozenset((SESSIONS_SEND, *CONVERSATION_TOOLS))
# sessions_send reads its text from ``message``, else from these aliases (in this order).
MESSAGE_KEYS = ("message", "SendMessage", "content", "text")
CHAIN_ARG = "chainId"  # a chain id a gateway put in the args it published instead
# ``agent:<agentId>:<rest>``: OpenClaw's session keys name their agent.
AGENT_SESSION_KEY = re.compile(r"^agent:([^:]+):.+$")
MAX_CYCLE_AGENTS = 16  # longest cycle looked for: bounds the search on a big fleet graph
# Kept per cycle key, the oldest going first: a graph's changelog record stays near 150 KB
# at most (17 agents talking to each other make 272 edges).
MAX_EDGES = 1024
MAX_RUNS = 4096  # runs whose last applied seq is kept (redeliveries), the oldest going first
# extra["only_tool"]: the block refuses the run's next call of this tool (not any tool).
ONLY_TOOL = "only_tool"


@dataclass(frozen=True, slots=True)
class Send:
    """One agent-to-agent send, as the graph sees it."""

    run_id: str
    seq: int
    event_time: int
    agent_id: str  # the sender
    target: str  # an agent id, or "session:…", "label:…", "conversation:…" when unresolved
    tool_name: str
    message_hash: str


def is_send_call(event: AgentEvent) -> bool:
    """Whether ``event`` is an agent-to-agent send call (what the worker forwards)."""
    return isinstance(event, ToolCall) and event.tool_name in SEND_TOOLS


def _text(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key)
    return value.strip() if isinstance(value, str) else ""


def send_target(tool_name: str, params: Any, sessions: Mapping[str, str]) -> str:
    """The node a send goes to, as OpenClaw resolves it: ``sessionKey`` (its agent when the key
    is ``agent:<id>:…`` or a session seen sending), else ``label`` (of ``agentId`` when given),
    else ``agentId`` (that agent's main session); conversations by ``conversationRef``.
    "" when the args name no target (the send fails in OpenClaw too)."""
    if not isinstance(params, dict):
        return ""
    if tool_name in CONVERSATION_TOOLS:
        ref = _text(params, "conversationRef").lower()
        return f"conversation:{ref}" if ref else ""
    session_key, label, agent = (_text(params, k) for k in ("sessionKey", "label", "agentId"))
    if session_key:
        if session_key in sessions:
            return sessions[session_key]
        match = AGENT_SESSION_KEY.match(session_key)
        return match.group(1) if match else f"session:{session_key}"
    if label:
        return agent or f"label:{label}"
    return agent


def send_message(params: Any) -> Any:
    """The text a send carries (OpenClaw's aliases included); None when there is none."""
    if not isinstance(params, dict):
        return None
    for key in MESSAGE_KEYS:
        value = params.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def chain_of(event: AgentEvent) -> str:
    """The chain id of a send: the envelope's, else a ``chainId`` in its args; "" if none."""
    if event.envelope.chain_id:
        return event.envelope.chain_id
    if isinstance(event, ToolCall):
        params = parse_json(event.args_json)
        if isinstance(params, dict) and isinstance(params.get(CHAIN_ARG), str):
            return params[CHAIN_ARG]
    return ""


def cycle_key(event: AgentEvent) -> str:
    """Where a send's graph lives: its chain, else its gateway's whole fleet (sessions_send
    reaches the sessions of one gateway). The agent-sends topic is keyed by it."""
    chain = chain_of(event)
    return f"chain:{chain}" if chain else f"gateway:{event.envelope.gateway_id}"


@dataclass(slots=True)
class Edge:
    """The newest send on one sender -> target edge, and how often its message repeated."""

    message_hash: str
    repeats: int
    run_id: str
    seq: int
    event_time: int
    agent_id: str
    gateway_id: str
    tool_name: str

    def to_list(self) -> list[Any]:
        return [
            self.message_hash,
            self.repeats,
            self.run_id,
            self.seq,
            self.event_time,
            self.agent_id,
            self.gateway_id,
            self.tool_name,
        ]


@dataclass
class CycleGraph:
    """The sends of one cycle key inside the window, in a form that serialises as JSON."""

    edges: dict[tuple[str, str], Edge] = field(default_factory=dict)
    sessions: dict[str, str] = field(default_factory=dict)  # session id -> its agent
    applied: dict[str, list[int]] = field(default_factory=dict)  # run -> [seq, event time]
    rounds_decided: dict[str, int] = field(default_factory=dict)  # cycle -> rounds decided

    def to_dict(self) -> dict[str, Any]:
        return {
            "edges": [[s, t, *e.to_list()] for (s, t), e in self.edges.items()],
            "sessions": self.sessions,
            "applied": self.applied,
            "rounds_decided": self.rounds_decided,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CycleGraph:
        edges = {(row[0], row[1]): Edge(*row[2:]) for row in data.get("edges", [])}
        return cls(
            edges,
            dict(data.get("sessions", {})),
            {run: list(v) for run, v in data.get("applied", {}).items()},
            dict(data.get("rounds_decided", {})),
        )

    def encode(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> CycleGraph:
        return cls() if not raw else cls.from_dict(json.loads(raw))

    def forget_before(self, oldest: int) -> None:
        """Drop what is older than ``oldest`` (event time, ms), and edges past MAX_EDGES."""
        for key in [k for k, e in self.edges.items() if e.event_time < oldest]:
            del self.edges[key]
        if len(self.edges) > MAX_EDGES:
            ordered = sorted(self.edges.items(), key=lambda item: (item[1].event_time, item[0]))
            for key, _ in ordered[: len(self.edges) - MAX_EDGES]:
                del self.edges[key]
        for run in [r for r, (_, t) in self.applied.items() if t < oldest]:
            del self.applied[run]
        if len(self.applied) > MAX_RUNS:
            by_time = sorted(self.applied.items(), key=lambda item: (item[1][1], item[0]))
            for run, _ in by_time[: len(self.applied) - MAX_RUNS]:
                del self.applied[run]
        senders = {e.agent_id for e in self.edges.values()}
        for session in [s for s, agent in self.sessions.items() if agent not in senders]:
            del self.sessions[session]
        for cycle in [c for c in self.rounds_decided if not self.closed(c.split(CYCLE_SEP))]:
            del self.rounds_decided[cycle]

    def closed(self, agents: list[str]) -> bool:
        """Whether every edge of the cycle ``agents`` is still in the window."""
        pairs = zip(agents, [*agents[1:], agents[0]], strict=True)
        return all(pair in self.edges for pair in pairs)

    def path(self, start: str, goal: str) -> list[str] | None:
        """The shortest path of edges ``start`` -> … -> ``goal`` (ties: names in order)."""
        out: dict[str, list[str]] = {}
        for sender, target in sorted(self.edges):
            out.setdefault(sender, []).append(target)
        frontier, came_from = [start], {start: ""}
        for _ in range(MAX_CYCLE_AGENTS):
            nxt = []
            for node in frontier:
                for target in out.get(node, []):
                    if target in came_from:
                        continue
                    came_from[target] = node
                    if target == goal:
                        route = [goal]
                        while route[-1] != start:
                            route.append(came_from[route[-1]])
                        return route[::-1]
                    nxt.append(target)
            frontier = nxt
        return None


CYCLE_SEP = " → "


def cycle_id(agents: list[str]) -> str:
    """One name per cycle whichever agent it is read from: rotated to its least agent."""
    turn = agents.index(min(agents))
    return CYCLE_SEP.join([*agents[turn:], *agents[:turn]])


ConfigFor = Callable[[str], LoopDetectionConfig]


def read_send(event: ToolCall, graph: CycleGraph) -> Send | None:
    """The send of a send call, its target resolved with the sessions seen so far."""
    params = parse_json(event.args_json)
    target = send_target(event.tool_name, params, graph.sessions)
    if not target:
        return None
    env = event.envelope
    return Send(
        run_id=env.run_id,
        seq=env.seq,
        event_time=env.event_time,
        agent_id=env.agent_id,
        target=target,
        tool_name=event.tool_name,
        message_hash=digest(send_message(params)),
    )


def apply_send(graph: CycleGraph, event: AgentEvent, config_for: ConfigFor) -> list[Decision]:
    """Add one event to ``graph`` (the graph of its :func:`cycle_key`); the decisions it
    brings: one per run of a cycle that just went round again with no progress, once
    ``warnAfter`` rounds are reached (a block from ``blockAfter``). Events that are not send
    calls, and a run's events at or below a seq already applied (redelivered), change
    nothing."""
    if not isinstance(event, ToolCall) or event.tool_name not in SEND_TOOLS:
        return []
    env = event.envelope
    settings = config_for(env.agent_id).agent_cycles
    if not settings.enabled:
        return []
    done = graph.applied.get(env.run_id)
    if done is not None and done[0] >= env.seq:
        return []
    graph.applied[env.run_id] = [env.seq, env.event_time]
    if env.session_id:
        graph.sessions[env.session_id] = env.agent_id
    send = read_send(event, graph)
    if send is None or send.target == send.agent_id:
        return []
    key = (send.agent_id, send.target)
    oldest = env.event_time - settings.window_seconds * 1000
    edge = graph.edges.get(key)
    if edge is not None and edge.event_time < oldest:
        edge = None  # out of the window: this send starts the edge afresh
    repeats = edge.repeats + 1 if edge and edge.message_hash == send.message_hash else 1
    graph.edges[key] = Edge(
        send.message_hash,
        repeats,
        send.run_id,
        send.seq,
        send.event_time,
        send.agent_id,
        env.gateway_id,
        send.tool_name,
    )
    graph.forget_before(oldest)
    back = graph.path(send.target, send.agent_id)
    if back is None:
        return []
    agents = [send.agent_id, *back[:-1]]  # the cycle, from this send's sender
    edges = [graph.edges[(a, agents[(i + 1) % len(agents)])] for i, a in enumerate(agents)]
    rounds = min(e.repeats for e in edges)
    name = cycle_id(agents)
    decided = graph.rounds_decided.get(name, 0)
    if rounds < decided:  # progress: the cycle is judged afresh from here
        graph.rounds_decided[name] = decided = rounds
    if rounds < settings.warn_after or rounds <= decided:
        return []
    graph.rounds_decided[name] = rounds
    action = Action.BLOCK if rounds >= settings.block_after else Action.WARN
    return cycle_decisions(event, agents, edges, rounds, action, config_for)


def cycle_decisions(
    trigger: ToolCall,
    agents: list[str],
    edges: list[Edge],
    rounds: int,
    action: Action,
    config_for: ConfigFor,
) -> list[Decision]:
    """The same verdict for the newest sending run of each edge, naming every agent."""
    loop = CYCLE_SEP.join([*agents, agents[0]])
    decisions, runs = [], set()
    for edge in edges:
        if edge.run_id in runs:
            continue
        runs.add(edge.run_id)
        cfg = config_for(edge.agent_id)
        if action is Action.BLOCK:
            effect = f"blocking {edge.agent_id}'s next {edge.tool_name}."
        else:
            effect = f"{edge.agent_id}'s next {edge.tool_name} will be blocked if it repeats."
        reason = (
            f"agents {loop} sent the same messages round {rounds} times with no progress; {effect}"
        )
        extra = {
            "agents": json.dumps(agents),
            "cycle_key": json.dumps(cycle_key(trigger)),
            "rounds": json.dumps(rounds),
            "trigger_run": json.dumps(trigger.envelope.run_id),
        }
        if action is Action.BLOCK:
            extra[ONLY_TOOL] = json.dumps(edge.tool_name)
        head = ToolCall(
            envelope=Envelope(
                edge.run_id, edge.agent_id, edge.gateway_id, edge.seq, edge.event_time
            ),
            tool_name=edge.tool_name,
        )
        decisions.append(
            build_decision(
                edge.run_id,
                head,
                cfg,
                action,
                detector=DETECTOR,
                severity=CRITICAL if action is Action.BLOCK else WARNING,
                count=rounds,
                tool_name=edge.tool_name,
                reason=reason,
                args_hash=f"{edge.tool_name}:{edge.message_hash}",
                extra=extra,
            )
        )
    return decisions


class AgentCycleGuard:
    """Every cycle key's graph in a dict: replay and tests run the worker's code path."""

    def __init__(self, config_for: ConfigFor) -> None:
        self.config_for = config_for
        self.graphs: dict[str, CycleGraph] = {}

    def process(self, event: AgentEvent) -> list[Decision]:
        if not is_send_call(event):
            return []
        graph = self.graphs.setdefault(cycle_key(event), CycleGraph())
        return apply_send(graph, event, self.config_for)
