"""The runs the benchmarks offer: one run's events (:class:`RunBuilder`), runs of each kind
(ordinary work, generic repeats, ping-pong, a loop that survives a compaction), and a
:class:`Plan` of many runs interleaved round robin, pre-encoded, with what the core expects
them to decide."""

from __future__ import annotations

import argparse
import json
import random
from collections import deque
from dataclasses import dataclass, field

from bench.lab.harness import CONFIG
from streams.core.engine import LoopGuard
from streams.core.events import (
    AgentEvent,
    CompactionRetry,
    Envelope,
    RunEnded,
    RunStarted,
    ToolCall,
    ToolResult,
)
from streams.core.fleet import fleet_from_document
from streams.wire.avro import encode_event

TOOLS = ["read_file", "grep", "exec", "web_search", "edit_file", "list_dir", "web_fetch"]
KINDS = {"ordinary": 0.82, "generic_repeat": 0.06, "ping_pong": 0.06, "compaction_loop": 0.06}


class RunBuilder:
    """Numbers one run's events."""

    def __init__(self, run_id: str, agent: str, gateway: str, t0: int) -> None:
        self.run_id, self.agent, self.gateway, self.t0 = run_id, agent, gateway, t0
        self.events: list[AgentEvent] = []

    def env(self) -> Envelope:
        seq = len(self.events) + 1
        return Envelope(self.run_id, self.agent, self.gateway, seq, self.t0 + 150 * seq)

    def cycle(self, tool: str, args: dict, result: object = None, error: str | None = None):
        text = json.dumps(args)
        call_id = f"call_{len(self.events)}"
        self.events.append(ToolCall(self.env(), tool, text, call_id))
        result_text = None if result is None else json.dumps(result)
        self.events.append(ToolResult(self.env(), tool, text, result_text, error, call_id))

    def varied(self, rng: random.Random, n: int) -> None:
        """Ordinary work: every call different, results different."""
        for _ in range(n):
            i = len(self.events)
            tool = rng.choice(TOOLS)
            args = {"path": f"src/pkg{rng.randrange(50)}/mod_{i}.py", "line": rng.randrange(900)}
            if rng.random() < 0.08:
                self.cycle(tool, args, error=f"ENOENT: no such file ({i})")
            else:
                self.cycle(tool, args, {"content": [{"type": "text", "text": f"out {i}"}]})

    def add(self, kind: type, **fields) -> None:
        self.events.append(kind(envelope=self.env(), **fields))


def build_run(kind: str, run_id: str, length: int, rng: random.Random) -> list[AgentEvent]:
    """One run of about ``length`` events (loops take what they need), RunStarted..RunEnded."""
    run = RunBuilder(
        run_id, f"agent-{rng.randrange(10)}", f"gw-{rng.randrange(4)}", 1_700_000_000_000
    )
    run.add(RunStarted)
    cycles = max(1, round((length - 2) / 2))
    if kind == "ordinary":
        if rng.random() < 0.1:  # a compaction that is not followed by a loop
            run.varied(rng, cycles // 2)
            run.add(CompactionRetry, trigger="context_overflow")
            run.varied(rng, cycles - cycles // 2)
        else:
            run.varied(rng, cycles)
    elif kind == "generic_repeat":  # warn from the 11th identical call, block, abort
        run.varied(rng, rng.randrange(1, 5))
        args = {"pattern": f"TODO-{rng.randrange(1000)}", "path": "."}
        for _ in range(rng.randrange(12, 28)):
            run.cycle("grep", args, {"matches": []})
    elif kind == "ping_pong":
        run.varied(rng, rng.randrange(1, 5))
        same = {"details": {"status": "failed", "exitCode": 2, "aggregated": "boom"}}
        for step in range(rng.randrange(12, 28)):
            if step % 2:
                run.cycle("read_file", {"path": "Makefile"}, {"text": "all: build"})
            else:
                run.cycle("exec", {"command": "make test"}, same)
    else:  # compaction_loop: aborted with compaction_loop_persisted
        run.varied(rng, rng.randrange(1, 5))
        run.add(CompactionRetry, trigger="context_overflow")
        for _ in range(3):
            run.cycle("web_fetch", {"url": "https://example.invalid/a"}, error="timeout")
    run.add(RunEnded, status="completed")
    return run.events


def compaction_loop_run(run_id: str) -> list[AgentEvent]:
    rng = random.Random(run_id)
    return build_run("compaction_loop", run_id, 0, rng)


@dataclass
class Plan:
    """Pre-encoded messages in production order, plus what the core expects them to decide."""

    keys: list[bytes] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)  # run index of each message
    seqs: list[int] = field(default_factory=list)
    triggers: dict[tuple[str, int], int] = field(default_factory=dict)  # (run, seq) → count
    run_ids: list[str] = field(default_factory=list)
    run_kinds: list[str] = field(default_factory=list)
    run_lengths: list[int] = field(default_factory=list)


def make_plan(args: argparse.Namespace, reserve: int, wave: int) -> Plan:
    """``--runs`` runs of about ``--events`` events in all, interleaved round robin."""
    rng = random.Random(args.seed * 1000 + wave)
    budget = max(args.events - reserve, args.runs * 4)
    kinds = rng.choices(list(KINDS), weights=list(KINDS.values()), k=args.runs)
    run_ids = [f"w{wave}-{i:06d}-{rng.getrandbits(32):08x}" for i in range(args.runs)]
    guard = LoopGuard(fleet_from_document(CONFIG))
    plan = Plan(run_ids=run_ids, run_kinds=kinds, run_lengths=[0] * args.runs)
    per_run: list[list[tuple[bytes, int]]] = [[] for _ in run_ids]

    def add(index: int, length: int) -> None:
        run_id = run_ids[index]
        events = build_run(kinds[index], run_id, length, rng)
        for event in events:
            for decision in guard.process(event):
                trigger = (run_id, decision.seq)
                plan.triggers[trigger] = plan.triggers.get(trigger, 0) + 1
        guard.runs.pop(run_id, None)
        per_run[index] = [(encode_event(e), e.envelope.seq) for e in events]
        plan.run_lengths[index] = len(events)

    for index, kind in enumerate(kinds):  # loops first: they take the length they need
        if kind != "ordinary":
            add(index, 0)
    ordinary = [i for i, kind in enumerate(kinds) if kind == "ordinary"]
    mean = max(4.0, (budget - sum(plan.run_lengths)) / max(1, len(ordinary)))
    for index in ordinary:
        add(index, rng.randint(max(4, round(mean * 0.5)), max(4, round(mean * 1.5))))
    # Round robin over the active runs: each run's events are spread over the whole load.
    pending = deque(range(min(args.concurrency, len(per_run))))
    next_run = len(pending)
    cursor = [0] * len(per_run)
    while pending:
        index = pending.popleft()
        value, seq = per_run[index][cursor[index]]
        plan.keys.append(run_ids[index].encode())
        plan.values.append(value)
        plan.runs.append(index)
        plan.seqs.append(seq)
        cursor[index] += 1
        if cursor[index] < len(per_run[index]):
            pending.append(index)
        elif next_run < len(per_run):
            pending.append(next_run)
            next_run += 1
    return plan
