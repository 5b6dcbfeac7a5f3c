"""The fleet benchmark's agents (bench/fleet_bench.py): one thread per simulated agent on the
Python gateway client, the loops among them, what the in-process core would have refused,
and what a leg measures (each call's wait, the verdicts in time, the worker's window)."""

from __future__ import annotations

import argparse
import math
import os
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from bench.lab.harness import (
    cpu_seconds,
    event_age_figures,
    percentile,
    stage_age_figures,
    worker_histograms,
)
from streams.core.engine import LoopGuard
from streams.core.events import Action, AgentEvent, Decision, ToolCall
from streams.core.fleet import fleet_from_document
from streams.gateway.client import GatewayClient, GatewayRun, RunAborted
from streams.wire.avro import RunWatermark

FLEET_CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 4, "criticalThreshold": 8}}
}
AGENT_ID = "fleet-agent"
CLIENTS = ("python", "typescript")
WORKERS = ("loopguard", "echo", "faustecho")
ECHOES = ("echo", "faustecho")  # answer with watermarks only, decide nothing


def reference_refusal(events: list[AgentEvent]) -> int | None:
    """The number of the first tool call (1-based) the in-process core would have refused:
    the first call after an enforced block or abort decision; None if none would be."""
    core = LoopGuard(fleet_from_document(FLEET_CONFIG))
    calls = 0
    refusing = False
    for event in events:
        if isinstance(event, ToolCall):
            calls += 1
            if refusing:
                return calls
        for decision in core.process(event):
            if decision.enforced and decision.action in (Action.BLOCK, Action.ABORT):
                refusing = True
    return None


def is_looping(index: int, share: float) -> bool:
    """Whether agent ``index`` loops: floor(N x share) of N agents, evenly spread, the same
    ones in both legs (fleet-agents.mjs has the same rule)."""
    return math.floor((index + 1) * share) > math.floor(index * share)


@dataclass
class WorkerWindow:
    """The worker's CPU and its event-age histogram at the measured window's start and end:
    how much of a decision's time passed before the worker took the event in."""

    pid: int
    web_port: int | None  # None: no /metrics (the echo)
    broker_pids: list[int] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    broker_cpu: dict[str, float] = field(default_factory=dict)
    ages: dict[str, dict[float, float]] = field(default_factory=dict)
    stages: dict[str, dict[str, dict[float, float]]] = field(default_factory=dict)

    def mark(self, name: str) -> None:
        self.cpu[name] = cpu_seconds(self.pid)
        self.broker_cpu[name] = sum(cpu_seconds(pid) for pid in self.broker_pids)
        if self.web_port is not None:
            scraped = worker_histograms(self.web_port)
            self.ages[name], self.stages[name] = scraped.ages, scraped.stages

    def figures(self) -> dict[str, Any]:
        ages = event_age_figures(self.ages.get("measuring", {}), self.ages.get("stopped", {}))
        return {
            "worker_cpu_s": self.cpu.get("stopped", 0.0) - self.cpu.get("measuring", 0.0),
            "broker_cpu_s": round(
                self.broker_cpu.get("stopped", 0.0) - self.broker_cpu.get("measuring", 0.0), 1
            ),
            "event_age_p50_max_ms": ages["event_age_p50_max_ms"],
            "event_age_p99_max_ms": ages["event_age_p99_max_ms"],
            "stage_ages": stage_age_figures(
                self.stages.get("measuring", {}), self.stages.get("stopped", {})
            ),
        }


@dataclass
class Measurements:
    """What the agents and the decision callback record, under one lock."""

    measure_from: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    published: dict[tuple[str, int], float] = field(default_factory=dict)
    pending: dict[str, deque[int]] = field(default_factory=dict)  # run -> seqs not yet covered
    decision_ms: list[float] = field(default_factory=list)
    watermark_ms: list[float] = field(default_factory=list)
    wait_ms: list[float] = field(default_factory=list)
    timeouts: int = 0
    leaked: list[int] = field(default_factory=list)
    early: int = 0  # looping runs refused before the reference call (should stay 0)
    looping_runs: int = 0  # looping runs that reached the reference's refusal
    calls: int = 0

    def on_publish(self, run: GatewayRun) -> None:
        now = time.perf_counter()
        if now >= self.measure_from:
            with self.lock:
                self.published[(run.run_id, run.seq)] = now
                self.pending.setdefault(run.run_id, deque()).append(run.seq)

    def on_decision(self, decision: Decision) -> None:
        now = time.perf_counter()
        with self.lock:
            sent = self.published.get((decision.run_id, decision.seq))
            if sent is not None:
                self.decision_ms.append((now - sent) * 1000)

    def on_watermark(self, mark: RunWatermark) -> None:
        """Every event of the run up to ``mark.seq`` is now decided, in the gateway's view."""
        now = time.perf_counter()
        with self.lock:
            seqs = self.pending.get(mark.run_id)
            while seqs and seqs[0] <= mark.seq:
                sent = self.published.pop((mark.run_id, seqs.popleft()))
                self.watermark_ms.append((now - sent) * 1000)

    def on_call(self, started: float, took: float, timed_out: bool) -> None:
        if started < self.measure_from:
            return
        with self.lock:
            self.calls += 1
            self.wait_ms.append(took * 1000)
            self.timeouts += timed_out

    def on_looping_run(
        self, events: list[AgentEvent], refused_at: int | None, allowed: int
    ) -> None:
        """A looping run's events as published; ``refused_at``: the call the gateway refused
        (None: none was); ``allowed``: the calls that ran."""
        reference = reference_refusal(events)
        if reference is None or (refused_at is None and allowed < reference):
            return  # the bench ended before the core would have refused: nothing to compare
        leaked = allowed - reference + 1  # the calls that ran from the reference's refusal on
        with self.lock:
            self.looping_runs += 1
            if leaked < 0:
                self.early += 1
            self.leaked.append(max(0, leaked))


class Agent(threading.Thread):
    def __init__(
        self, index: int, client: GatewayClient, args: argparse.Namespace, m: Measurements
    ) -> None:
        super().__init__(name=f"fleet-agent-{index}", daemon=True)
        self.index, self.client, self.args, self.m = index, client, args, m
        self.rng = random.Random(args.seed * 100_003 + index)
        self.looping = is_looping(index, args.looping)
        self.stop = threading.Event()
        self.runs = 0

    def think(self) -> bool:
        """Sleep one think time; False when the bench is over."""
        args = self.args
        if self.rng.random() < args.back_to_back:
            return not self.stop.is_set()
        delay = self.rng.lognormvariate(math.log(args.think_median), args.think_sigma)
        return not self.stop.wait(delay)

    def run(self) -> None:
        # Spread the start over one median think time, as a fleet does not start in step.
        if self.stop.wait(self.rng.uniform(0, 2 * self.args.think_median)):
            return
        while not self.stop.is_set():
            self.runs += 1
            self.one_run()

    def one_run(self) -> None:
        run = self.client.start_run(AGENT_ID, run_id=f"a{self.index}-r{self.runs}")
        self.m.on_publish(run)
        attempts, refused_at = 0, None
        limit = math.inf if self.looping else self.args.run_calls
        while attempts < limit and self.think():
            attempts += 1
            tool, call_args, result = self.next_call(attempts)
            started = time.perf_counter()
            try:
                verdict = run.before_tool(tool, call_args)
            except RunAborted:
                refused_at = attempts
                self.m.on_call(started, time.perf_counter() - started, False)
                break
            self.m.on_call(started, time.perf_counter() - started, verdict.timed_out)
            self.m.on_publish(run)
            if not verdict.allowed:
                refused_at = attempts
                break
            run.after_tool(tool, call_args, result=result)
            self.m.on_publish(run)
        if self.looping:
            allowed = attempts if refused_at is None else refused_at - 1
            self.m.on_looping_run(run.events, refused_at, allowed)
        run.end()

    def next_call(self, n: int) -> tuple[str, dict[str, Any], Any]:
        if self.looping:
            return "exec", {"command": "make test"}, {"exit": 1, "out": "same failure"}
        return "read_file", {"path": f"src/a{self.index}/f{n}.py"}, {"text": f"line {n}"}


def summary(
    client: str, m: Measurements, args: argparse.Namespace, window: WorkerWindow, **extra: Any
) -> dict[str, Any]:
    waits, decisions, leaked = sorted(m.wait_ms), sorted(m.decision_ms), sorted(m.leaked)
    if args.worker in ECHOES:
        leaked = []  # the echo refuses nothing: every looping call after the reference's ran
    marks = sorted(m.watermark_ms)
    within = 1 - m.timeouts / m.calls if m.calls else float("nan")
    return {
        "client": client,
        "worker": args.worker,
        "broker": args.broker,
        "guarantee": args.guarantee,
        "agents": args.agents,
        "seconds": args.seconds,
        "calls": m.calls,
        "calls_per_s": round(m.calls / args.seconds, 1),
        "decisions": len(decisions),
        "decision_p50_ms": round(percentile(decisions, 0.5), 1),
        "decision_p99_ms": round(percentile(decisions, 0.99), 1),
        "events_decided": len(marks),
        "decided_p50_ms": round(percentile(marks, 0.5), 1),
        "decided_p99_ms": round(percentile(marks, 0.99), 1),
        "before_tool_p50_ms": round(percentile(waits, 0.5), 2),
        "before_tool_p99_ms": round(percentile(waits, 0.99), 2),
        "within_budget": round(within, 4),
        "timeouts": m.timeouts,
        "looping_runs": m.looping_runs,
        "leaked_p50": percentile(leaked, 0.5) if leaked else None,
        "leaked_p99": percentile(leaked, 0.99) if leaked else None,
        "leaked_max": leaked[-1] if leaked else None,
        "refused_early": m.early,
        **window.figures(),
        **extra,
        "load_average": round(os.getloadavg()[0], 2),
    }
