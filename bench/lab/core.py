"""Throughput of the detector core (``LoopGuard.process``) on one core.

Builds a realistic event mix up front -- many concurrent runs of varied length, mostly
ordinary varied tool use, some loops (identical repeats, ping-pong, stuck polls, repeated
message sends with fresh ids, unknown-tool retries, context-overflow compactions), results
carrying exec / process / message / file payloads -- then times ``LoopGuard.process`` over the
pre-built events for several ``historySize`` values and reports events/s, µs/event and how
flat the cost is as the window grows (ratio of the largest window to 30).

    python bench/core_bench.py [--events 200000] [--sizes 30,100,1000] [--repeat 3] [--json]
                               [--per-tool none|other|mix]

``--per-tool other`` adds ``perTool`` entries for tools the mix never calls (the cost of the
lookup alone); ``mix`` names tools it does call (web_search's volatile fields stripped, grep's
thresholds, process exempt from genericRepeat).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import random
import time

from streams.core.engine import LoopGuard, core_build
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
from streams.core.hashing import clear_memos

VETO = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
AGENTS = ["main", "coder", "researcher", "ops-bot", "support"]
WORDS = [
    *("alpha", "beta", "gamma", "delta", "build", "test", "deploy"),
    *("fix", "refactor", "docs", "api", "cache", "queue"),
]


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"))


class RunBuilder:
    """Emits one run's events with its own seq counter."""

    def __init__(self, rng: random.Random, run_no: int, start_ms: int, gateway: LoopGuard) -> None:
        self.rng = rng
        self.gateway = gateway  # plays the gateway: obeys blocks and aborts while generating
        self.stopped = False
        self.run_id = f"run-{run_no:06d}"
        self.agent_id = rng.choice(AGENTS)
        self.gateway_id = f"gw-{run_no % 7}"
        self.seq = 0
        self.clock = start_ms
        self.events: list[AgentEvent] = []
        self.calls = 0

    def env(self) -> Envelope:
        self.seq += 1
        self.clock += self.rng.randint(5, 900)
        return Envelope(self.run_id, self.agent_id, self.gateway_id, self.seq, self.clock)

    def emit(self, event: AgentEvent) -> list:
        self.events.append(event)
        return self.gateway.process(event)

    def cycle(self, tool: str, args: dict, result=None, error: str | None = None) -> None:
        self.calls += 1
        if self.stopped:
            return
        call_id = f"call_{self.run_id}_{self.seq + 1}"
        args_json = dumps(args)
        decided = self.emit(ToolCall(self.env(), tool, args_json, call_id))
        actions = {d.action.value for d in decided}
        if "abort" in actions:  # the gateway stops the run: no result, no further calls
            self.stopped = True
            self.emit(RunEnded(self.env(), "aborted"))
            return
        if "block" in actions:  # the gateway refuses the call and reports the veto
            result, error = VETO, None
        result_json = None if result is None else dumps(result)
        # most gateways echo args and the call id; some send only the call id
        echo = None if self.rng.random() < 0.2 else args_json
        decided = self.emit(ToolResult(self.env(), tool, echo, result_json, error, call_id))
        if any(d.action.value == "abort" for d in decided):  # post-compaction guard
            self.stopped = True
            self.emit(RunEnded(self.env(), "aborted"))

    def parallel(self, calls: list[tuple[str, dict, dict]]) -> None:
        """Several calls issued together (with call ids); results come back in any order."""
        if self.stopped:
            return
        issued = []
        for tool, args, result in calls:
            self.calls += 1
            call_id = f"call_{self.run_id}_{self.seq + 1}"
            decided = self.emit(ToolCall(self.env(), tool, dumps(args), call_id))
            actions = {d.action.value for d in decided}
            if "abort" in actions:
                self.stopped = True
                self.emit(RunEnded(self.env(), "aborted"))
                return
            issued.append((tool, args, VETO if "block" in actions else result, call_id))
        self.rng.shuffle(issued)
        for tool, args, result, call_id in issued:
            decided = self.emit(
                ToolResult(self.env(), tool, dumps(args), dumps(result), None, call_id)
            )
            if any(d.action.value == "abort" for d in decided):
                self.stopped = True
                self.emit(RunEnded(self.env(), "aborted"))
                return


def text(body: str, **details) -> dict:
    return {"content": [{"type": "text", "text": body}], "details": details}


def exec_payload(rng: random.Random, output: str, exit_code: int = 0) -> dict:
    stamp = f"2025-03-0{rng.randint(1, 9)}T1{rng.randint(0, 9)}:0{rng.randint(0, 9)}:00Z"
    body = (
        f"{stamp} {output}\nfinished in {rng.randint(10, 9000)}ms (pid {rng.randint(100, 99999)})"
    )
    return {
        "content": [{"type": "text", "text": body}],
        "details": {
            "status": "completed" if exit_code == 0 else "failed",
            "exitCode": exit_code,
            "timedOut": False,
            "aggregated": body,
            "durationMs": rng.randint(10, 9000),
            "pid": rng.randint(100, 99999),
            "sessionId": f"s{rng.randint(1, 10**6)}",
            "cwd": "/work/repo",
        },
    }


def normal_step(b: RunBuilder) -> None:
    rng = b.rng
    n = b.calls
    kind = rng.random()
    if kind < 0.30:
        path = f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}_{rng.randint(0, 400)}.py"
        b.cycle("read", {"path": path}, text(f"contents of {path} " * rng.randint(1, 30)))
    elif kind < 0.45:
        cmd = rng.choice(["pytest -q", "make build", "git status", "ls -la", "npm test"])
        cmd += f" {rng.choice(WORDS)}{n}"
        b.cycle("exec", {"command": cmd}, exec_payload(rng, f"ok {n}", rng.choice([0, 0, 0, 1])))
    elif kind < 0.55:
        path = f"src/{rng.choice(WORDS)}_{n}.py"
        b.cycle("write", {"path": path, "content": "x" * rng.randint(50, 2000)}, text("written"))
    elif kind < 0.65:
        q = " ".join(rng.sample(WORDS, 3))
        hits = [{"title": f"{q} {i}", "url": f"https://ex.com/{n}/{i}"} for i in range(5)]
        b.cycle("web_search", {"query": q, "count": 5}, {"details": {"results": hits}})
    elif kind < 0.72:
        poll = {"action": "poll", "sessionId": f"bg-{n // 10}"}
        done = rng.random() < 0.3
        payload = {
            "content": [{"type": "text", "text": f"progress {n}"}],
            "details": {"status": "exited" if done else "running", "aggregated": f"line {n}"},
        }
        b.cycle("process", poll, payload)
    elif kind < 0.80:
        msg = {"action": "send", "to": "#team", "text": f"status update {n}"}
        sent = {"status": "sent", "messageId": f"m{rng.getrandbits(40)}", "ts": b.clock}
        b.cycle("message", msg, {"details": {**sent, "text": msg["text"]}})
    elif kind < 0.88:
        plan = [
            {"step": f"{w} {n}", "status": rng.choice(["pending", "in_progress", "completed"])}
            for w in rng.sample(WORDS, 4)
        ]
        b.cycle("update_plan", {"plan": plan}, text("Plan updated"))
    elif kind < 0.92:
        b.cycle("grep", {"pattern": rng.choice(WORDS), "path": "src"}, text(f"{n} matches"))
    elif kind < 0.96:
        files = [f"src/{w}.py" for w in rng.sample(WORDS, rng.randint(2, 4))]
        b.parallel([("read", {"path": f}, text(f"{f} v{n}")) for f in files])
    else:
        b.cycle("read", {"path": f"missing_{n}.txt"}, error="ENOENT: no such file or directory")


def loop_segment(b: RunBuilder) -> None:
    rng = b.rng
    kind = rng.random()
    # most loops are noticed (warned) and broken by the agent; a few persist long enough to block
    length = rng.randint(4, 14) if rng.random() < 0.85 else rng.randint(15, 24)
    if kind < 0.30:  # identical repeat with identical results (the classic stuck loop)
        args = {"path": f"config/{rng.choice(WORDS)}.yaml"}
        for _ in range(length):
            b.cycle("read", args, text("same content"))
    elif kind < 0.45:  # same failing command, timestamps/pids differ
        args = {"command": f"pytest tests/test_{rng.choice(WORDS)}.py"}
        for _ in range(length):
            b.cycle("exec", args, exec_payload(rng, "1 failed", exit_code=1))
    elif kind < 0.60:  # stuck poll
        args = {"action": "poll", "sessionId": f"stuck-{b.calls}"}
        payload = {"content": [], "details": {"status": "running", "aggregated": ""}}
        for _ in range(length):
            b.cycle("process", args, payload)
    elif kind < 0.75:  # ping-pong
        a = ("read", {"path": "a.txt"}, text("A"))
        c = ("write", {"path": "a.txt", "content": "v"}, text("ok"))
        for i in range(length):
            b.cycle(*(a if i % 2 == 0 else c))
    elif kind < 0.87:  # the same message sent again and again (fresh ids each time)
        msg = {"action": "send", "to": "#ops", "text": "deploy finished"}
        for _ in range(length):
            sent = {"status": "sent", "messageId": f"m{rng.getrandbits(40)}", "ts": b.clock}
            b.cycle("message", msg, {"details": {**sent, "text": msg["text"]}})
    elif kind < 0.95:  # unknown tool retries
        for i in range(min(length, 11)):
            b.cycle(
                "browser_open", {"url": f"https://ex.com/{i}"}, error="Unknown tool: browser_open"
            )
    else:  # context overflow, compaction, and the same thing again
        if not b.stopped:
            b.emit(CompactionRetry(b.env(), "context_overflow"))
        args = {"path": "huge.log"}
        for _ in range(rng.randint(2, 5)):
            b.cycle("read", args, text("x" * 200))


def build_events(total: int, seed: int = 7, concurrency: int = 300) -> list[AgentEvent]:
    """Runs of varied length, interleaved as ``concurrency`` runs progressing side by side."""
    rng = random.Random(seed)
    gateway = make_guard(30, per_tool="none")  # the same events whatever --per-tool says
    runs: list[list[AgentEvent]] = []
    produced = 0
    run_no = 0
    while produced < total:
        run_no += 1
        b = RunBuilder(rng, run_no, 1_700_000_000_000 + run_no * 1000, gateway)
        b.emit(RunStarted(b.env()))
        roll = rng.random()
        # most runs are short, some medium; a few long ones fill even a 1000-call window
        calls = (
            rng.randint(8, 60)
            if roll < 0.80
            else rng.randint(100, 400)
            if roll < 0.98
            else rng.randint(1500, 3000)
        )
        while b.calls < calls and not b.stopped:
            if rng.random() < 0.04:
                loop_segment(b)
            else:
                normal_step(b)
        if not b.stopped:
            b.emit(RunEnded(b.env(), "completed"))
        gateway.runs.pop(b.run_id, None)
        runs.append(b.events)
        produced += len(b.events)
    # interleave: a pool of active runs, each advancing a few events at a time
    out: list[AgentEvent] = []
    queue = list(reversed(runs))
    active: list[list[AgentEvent]] = []
    positions: list[int] = []
    while (queue or active) and len(out) < total:
        while queue and len(active) < concurrency:
            active.append(queue.pop())
            positions.append(0)
        i = rng.randrange(len(active))
        events, pos = active[i], positions[i]
        step = rng.randint(1, 4)
        out.extend(events[pos : pos + step])
        positions[i] = pos + step
        if positions[i] >= len(events):
            active[i], positions[i] = active[-1], positions[-1]
            active.pop()
            positions.pop()
    return out[:total]


PER_TOOL_BLOCKS: dict[str, dict] = {
    "none": {},
    "other": {
        "web_fetch": {"volatileFields": ["fetchedAt", "items.*.fetchedAt"]},
        "browser": {"warningThreshold": 5, "criticalThreshold": 8},
        "sessions_spawn": {"exempt": ["pingPong", "postCompactionGuard"]},
    },
    "mix": {
        "web_search": {"volatileFields": ["results.*.fetchedAt", "requestId"]},
        "grep": {"warningThreshold": 5, "criticalThreshold": 8},
        "process": {"exempt": ["genericRepeat"]},
    },
}
PER_TOOL = "none"  # set from --per-tool


def make_guard(history_size: int, per_tool: str | None = None) -> LoopGuard:
    block: dict = {"enabled": True, "historySize": history_size}
    if entries := PER_TOOL_BLOCKS[per_tool or PER_TOOL]:
        block["perTool"] = entries
    return LoopGuard(fleet_from_document({"tools": {"loopDetection": block}}))


def time_once(events: list[AgentEvent], history_size: int) -> tuple[float, float, int]:
    """Wall-clock (perf_counter) and CPU (process_time) seconds for one pass, and decisions."""
    guard = make_guard(history_size)
    process = guard.process
    decisions = 0
    clear_memos()  # a pass must not hit hashes memoised by the previous pass on these events
    gc.collect()
    gc.disable()
    try:
        cpu_start = time.process_time()
        start = time.perf_counter()
        for event in events:
            decided = process(event)
            if decided:
                decisions += len(decided)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    finally:
        gc.enable()
    return elapsed, cpu, decisions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--sizes", default="30,100,1000", help="historySize values to time")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions (best kept)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    parser.add_argument(
        "--per-tool", choices=sorted(PER_TOOL_BLOCKS), default="none", help="perTool entries"
    )
    args = parser.parse_args(argv)
    global PER_TOOL
    PER_TOOL = args.per_tool
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    if hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):  # one core: the core is single-threaded anyway
            os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})

    t0 = time.perf_counter()
    events = build_events(args.events, args.seed)
    built = time.perf_counter() - t0
    runs = len({e.envelope.run_id for e in events})
    calls = sum(isinstance(e, ToolCall) for e in events)
    print(
        f"built {len(events)} events ({calls} tool calls, {runs} runs) in {built:.1f}s; "
        f"python {platform.python_version()} on {platform.machine()}; core {core_build()}; "
        f"perTool {args.per_tool}"
    )

    mix: dict[str, int] = {}
    guard = make_guard(30)
    for event in events:
        for d in guard.process(event):
            key = "run_aborted" if d.detector == "run_aborted" else d.action.value
            mix[key] = mix.get(key, 0) + 1
    print(
        "decision mix at historySize=30: " + ", ".join(f"{k} {v}" for k, v in sorted(mix.items()))
    )

    warm = events[: max(1, len(events) // 10)]
    results = {}
    for size in sizes:
        time_once(warm, size)  # warm-up: code paths, allocator, caches
    # sizes take turns in every repetition, so background load drifts hit them alike
    best: dict[int, float] = {}
    best_cpu: dict[int, float] = {}
    decisions: dict[int, int] = {}
    for _ in range(max(1, args.repeat)):
        for size in sizes:
            elapsed, cpu, decisions[size] = time_once(events, size)
            best[size] = min(elapsed, best.get(size, elapsed))
            best_cpu[size] = min(cpu, best_cpu.get(size, cpu))
    for size in sizes:
        eps = len(events) / best[size]
        us = best[size] / len(events) * 1e6
        cpu_us = best_cpu[size] / len(events) * 1e6
        results[size] = {
            "events_per_s": eps,
            "us_per_event": us,
            "cpu_us_per_event": cpu_us,
            "decisions": decisions[size],
        }
        print(
            f"historySize={size:>5}: {eps:>10,.0f} events/s  {us:7.2f} µs/event  "
            f"(cpu {cpu_us:6.2f} µs/event; {decisions[size]} decisions; best of {args.repeat})"
        )

    ratio = cpu_ratio = None
    if 30 in results and len(results) > 1:
        largest = max(results)
        ratio = results[largest]["us_per_event"] / results[30]["us_per_event"]
        cpu_ratio = results[largest]["cpu_us_per_event"] / results[30]["cpu_us_per_event"]
        print(
            f"flatness: µs/event at historySize={largest} / historySize=30 = {ratio:.2f}x "
            f"(cpu {cpu_ratio:.2f}x)"
        )
    if args.json:
        print(
            json.dumps(
                {
                    "events": len(events),
                    "runs": runs,
                    "repeat": args.repeat,
                    "python": platform.python_version(),
                    "core_build": core_build(),
                    "per_tool": args.per_tool,
                    "results": {str(k): v for k, v in results.items()},
                    "decision_mix_30": mix,
                    "ratio_largest_vs_30": ratio,
                    "cpu_ratio_largest_vs_30": cpu_ratio,
                    "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                },
                sort_keys=True,
            )
        )
    return 0
