"""Bounded load generator: many concurrent runs through N loopguard workers it starts itself.

Starts a broker (``--broker tansu``, the embedded one with memory storage, or ``kafka``, a
3-node Apache Kafka cluster on loopback), N workers of one Faust app (SQLite audit trail
in a temp dir, or ``--db URL``) and a gateway client, then produces a pre-encoded mix of runs
with kafka-python at ``--rate`` (default unlimited): mostly ordinary varied tool cycles, some
loops (generic repeat, ping-pong, loops that survive a context compaction); every run ends with
RunEnded. All runs are in flight at once (round robin over ``--concurrency`` active runs), so
the workers hold that many run states. Producing stops by itself after ``--events`` or
``--seconds``, whichever comes first (runs cut short still get their RunEnded); draining is
bounded by ``--drain-timeout``. ``--waves N`` repeats the load with new runs after the ended
ones expired, to see whether worker memory is reused or keeps growing.

Prints progress lines while it runs and, per wave:

* events/s sustained end to end: time from the first event produced until the decision of
  every sentinel run (one per partition, produced last) arrived;
* decision latency p50/p99: decision-triggering event produced -> its decision received by a
  gateway client (``on_decision``); at an unlimited rate this includes the backlog's queueing;
* decisions expected (the same events through the pure core) vs received;
* worker RSS (VmRSS from /proc/PID/status) before the load, at peak, after the runs ended and
  after the ended runs expired (workers run with ``LOOPGUARD_RUN_IDLE_TTL=--idle-ttl``);

then the ``runs`` table size over time, rebuilt from its changelog topic (the worker writes a
tombstone per expired run), and the memory per active run measured in-process: ``--run-mem``
RunStates with 30-call histories built through LoopGuard under tracemalloc.

    python bench/load_gen.py [--broker tansu|kafka] [--workers 2] [--runs 2000]
                             [--events 60000] [--seconds 300] [--rate 0] [--idle-ttl 30]
                             [--waves 1] [--db URL] [--json]

The issue's targets are ``--runs 10000 --events 1000000``: give ``--idle-ttl`` well above
runs / (events/s) then, or active runs expire between two of their own events.
Everything runs on loopback.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

# Appended, not prepended: an installed build (the compiled core, setup.py) comes first.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from brokers import add_broker_arg, gateway_fetch_wait_ms, start_broker  # noqa: E402
from harness import (  # noqa: E402
    CONFIG,
    RssSampler,
    broker_pids,
    mb,
    percentile,
    rss_kb,
    start_workers,
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.partitioner.default import murmur2  # noqa: E402

from streams.core.engine import LoopGuard  # noqa: E402
from streams.core.events import (  # noqa: E402
    AgentEvent,
    CompactionRetry,
    Decision,
    Envelope,
    RunEnded,
    RunStarted,
    ToolCall,
    ToolResult,
)
from streams.core.fleet import fleet_from_document  # noqa: E402
from streams.devtools.worker_process import wait_until_processing  # noqa: E402
from streams.gateway.client import GatewayClient  # noqa: E402
from streams.kafka.topics import ensure_topics  # noqa: E402
from streams.settings import Settings  # noqa: E402
from streams.wire.avro import encode_event  # noqa: E402
from streams.worker.state_codec import RunStateCodec  # noqa: E402

APP_ID = "loopguard"
EXPIRE_TIMER_INTERVAL = 10.0  # streams.worker.agents.WorkerAgents.expire_runs
TOOLS = ["read_file", "grep", "exec", "web_search", "edit_file", "list_dir", "web_fetch"]
KINDS = {"ordinary": 0.82, "generic_repeat": 0.06, "ping_pong": 0.06, "compaction_loop": 0.06}


# ------------------------------------------------------------------------------- workload


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


def sentinel_ids(prefix: str, partitions: int) -> list[str]:
    """One run id per partition (same murmur2 as the producers), to mark 'all processed'."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        run_id = f"{prefix}-sentinel-{i}"
        found.setdefault((murmur2(run_id.encode()) & 0x7FFFFFFF) % partitions, run_id)
        i += 1
    return list(found.values())


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


# ------------------------------------------------------------------------------ measuring


def table_sizes(
    bootstrap: str, topic: str, marks: dict[str, float], idle_ttl: float
) -> dict[str, int]:
    """Live keys of the ``runs`` table at wall-clock ``marks`` (epoch s), plus the peak.

    Rebuilt from the changelog: a key is live from a record with a value until a tombstone.
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_bytes=64 * 1_048_576,
        max_partition_fetch_bytes=16 * 1_048_576,
    )
    records: list[tuple[int, bytes, bool]] = []
    volume = 0
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and any(
            consumer.position(tp) < ends[tp] for tp in partitions
        ):
            for batch in consumer.poll(timeout_ms=500, max_records=50_000).values():
                records.extend((r.timestamp, r.key, r.value is None) for r in batch)
                volume += sum(len(r.value or b"") for r in batch)
    finally:
        consumer.close()
    records.sort(key=lambda r: r[0])
    live: set[bytes] = set()
    dropped: set[bytes] = set()
    recreated: set[bytes] = set()
    last_write: dict[bytes, int] = {}
    long_gaps: set[bytes] = set()  # runs whose state went > idle_ttl without a write
    sizes: dict[str, int] = {}
    pending = sorted(marks.items(), key=lambda kv: kv[1])
    peak = 0
    for timestamp, key, tombstone in records:
        while pending and timestamp > pending[0][1] * 1000:
            sizes[pending.pop(0)[0]] = len(live)
        if tombstone:
            live.discard(key)
            dropped.add(key)
        else:
            live.add(key)
            if key in dropped:
                recreated.add(key)
            if timestamp - last_write.get(key, timestamp) > idle_ttl * 1000:
                long_gaps.add(key)
            last_write[key] = timestamp
        peak = max(peak, len(live))
    for name, _ in pending:
        sizes[name] = len(live)
    sizes["peak"] = peak
    sizes["records"] = len(records)
    sizes["tombstones"] = sum(1 for r in records if r[2])
    sizes["recreated"] = len(recreated)  # state written again after its run was expired
    sizes["long_gaps"] = len(long_gaps)
    sizes["bytes"] = volume
    return sizes


def memory_per_run(k: int, seed: int) -> tuple[float, float, float]:
    """(bytes per RunState via tracemalloc, serialised changelog bytes per run, seconds)."""
    rng = random.Random(seed)
    runs = []
    for index in range(k):
        run = RunBuilder(f"mem-{index:06d}-{rng.getrandbits(32):08x}", "agent-0", "gw-0", 0)
        run.add(RunStarted)
        run.varied(rng, 30)  # 30 calls, each with its result: a full default history
        runs.append(run.events)
    guard = LoopGuard(fleet_from_document(CONFIG))
    guard.config_for("agent-0")
    gc.collect()
    started = time.perf_counter()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for events in runs:
        for event in events:
            guard.process(event)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    elapsed = time.perf_counter() - started
    codec = RunStateCodec()
    sample = list(guard.runs.values())[:: max(1, k // 200)]
    serialised = statistics.mean(len(codec._dumps(state)) for state in sample)
    return used / k, serialised, elapsed


# ---------------------------------------------------------------------------------- main


class Decisions:
    """What the gateway client hears, with arrival times (the ``on_decision`` callback)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.by_event: dict[tuple[str, int], float] = {}  # (run, seq) → first arrival
        self.by_run: dict[str, float] = {}  # run → first arrival
        self.count = 0

    def __call__(self, decision: Decision) -> None:
        now = time.perf_counter()
        with self.cond:
            self.count += 1
            self.by_event.setdefault((decision.run_id, decision.seq), now)
            self.by_run.setdefault(decision.run_id, now)
            self.cond.notify_all()

    def wait_runs(self, run_ids: list[str], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: all(r in self.by_run for r in run_ids), timeout)


@dataclass
class Wave:
    """Figures of one wave of load."""

    number: int
    plan: Plan
    produced: int = 0
    produced_in: float = 0.0
    cut: bool = False
    drained: bool = False
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    expected: int = 0
    received: int = 0
    missing: int = 0
    unexpected: int = 0
    rss_before: list[int | None] = field(default_factory=list)
    rss_peak: list[int] = field(default_factory=list)
    rss_ended: list[int | None] = field(default_factory=list)
    rss_expired: list[int | None] | None = None
    ended_wall: float = 0.0
    expired_wall: float = 0.0

    @property
    def rate(self) -> float:
        return self.produced / self.elapsed if self.elapsed else 0.0


def run_wave(
    args: argparse.Namespace,
    number: int,
    producer: KafkaProducer,
    topic: str,
    heard: Decisions,
    sampler: RssSampler,
    expiry_wait: float,
) -> Wave:
    sentinels = sentinel_ids(f"load{number}", args.partitions)
    sentinel_events = [compaction_loop_run(s) for s in sentinels]
    reserve = sum(map(len, sentinel_events))
    built = time.perf_counter()
    plan = make_plan(args, reserve, number)
    kinds = {k: plan.run_kinds.count(k) for k in KINDS}
    print(
        f"wave {number}: {len(plan.values):,} events in {len(plan.run_ids):,} runs {kinds}, "
        f"{sum(plan.triggers.values()):,} decisions expected, mean run "
        f"{statistics.mean(plan.run_lengths):.0f} events, +{reserve} sentinel events "
        f"(built and encoded in {time.perf_counter() - built:.1f}s)",
        flush=True,
    )
    wave = Wave(number, plan)
    wave.rss_before = sampler.sample()
    sent_at: dict[tuple[str, int], float] = {}
    triggers = plan.triggers
    last_seq = [0] * len(plan.run_ids)
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    stop_progress = threading.Event()

    heard_before = heard.count

    def progress() -> None:
        while not stop_progress.wait(args.progress):
            values = sampler.samples[-1][1]
            rss, broker_rss = values[: args.workers], sum(v or 0 for v in values[args.workers :])
            print(
                f"  [wave {number} {time.perf_counter() - start:6.1f}s] produced "
                f"{wave.produced:,}, decisions seen {heard.count - heard_before:,}, worker RSS "
                f"{' + '.join(mb(v) for v in rss)}, broker RSS {mb(broker_rss)}",
                flush=True,
            )

    start = time.perf_counter()
    threading.Thread(target=progress, name="progress", daemon=True).start()
    deadline = start + args.seconds
    next_at = start
    send = producer.send
    try:
        for i, (key, value) in enumerate(zip(plan.keys, plan.values, strict=True)):
            now = time.perf_counter()
            if interval:
                if next_at > now:
                    time.sleep(next_at - now)
                next_at += interval
            if now > deadline:
                wave.cut = True
                break
            send(topic, key=key, value=value)
            run_index = plan.runs[i]
            seq = last_seq[run_index] = plan.seqs[i]
            trigger = (plan.run_ids[run_index], seq)
            if trigger in triggers:
                sent_at[trigger] = time.perf_counter()
            wave.produced += 1
        if wave.cut:  # runs cut short still end
            for index, seq in enumerate(last_seq):
                if 0 < seq < plan.run_lengths[index]:
                    run_id = plan.run_ids[index]
                    ended = RunEnded(Envelope(run_id, "agent", "gw", seq + 1, 0), "cut")
                    send(topic, key=run_id.encode(), value=encode_event(ended))
                    wave.produced += 1
        for events in sentinel_events:
            for event in events:
                send(topic, key=event.envelope.run_id.encode(), value=encode_event(event))
                wave.produced += 1
        producer.flush()
        wave.produced_in = time.perf_counter() - start
        wave.drained = heard.wait_runs(sentinels, args.drain_timeout)
        with heard.cond:
            end = max((heard.by_run[s] for s in sentinels if s in heard.by_run), default=0.0)
        wave.elapsed = (end if wave.drained else time.perf_counter()) - start
        time.sleep(1.0)  # the other partitions' last control messages
        wave.rss_ended = sampler.sample()
        wave.ended_wall = time.time()
        wave.rss_peak = sampler.peak_between(start, time.perf_counter())
    finally:
        stop_progress.set()
    if expiry_wait > 0:
        print(f"  waiting {expiry_wait:.0f}s for ended runs to expire ...", flush=True)
        time.sleep(expiry_wait)
        wave.rss_expired = sampler.sample()
    wave.expired_wall = time.time()

    with heard.cond:
        received = dict(heard.by_event)
    wave.latencies = sorted(
        (received[t] - sent) * 1000 for t, sent in sent_at.items() if t in received
    )
    wave.expected = sum(triggers[t] for t in sent_at)
    run_set = set(plan.run_ids)
    wave.received = sum(1 for t in received if t[0] in run_set)
    wave.missing = sum(1 for t in sent_at if t not in received)
    wave.unexpected = sum(1 for t in received if t[0] in run_set and t not in triggers)
    return wave


def report_wave(args: argparse.Namespace, wave: Wave, pids: list[int], hwm: list) -> None:
    p50 = statistics.median(wave.latencies) if wave.latencies else float("nan")
    p99 = percentile(wave.latencies, 0.99)
    print(
        f"  wave {wave.number}: offered {wave.produced:,} events "
        f"({len(wave.plan.run_ids):,} runs, {args.concurrency:,} in flight) at "
        f"{'unlimited rate' if not args.rate else f'{args.rate:,.0f} events/s'}; producer "
        f"took {wave.produced_in:.1f}s" + (" (cut by --seconds)" if wave.cut else "")
    )
    print(
        f"    sustained end to end: {wave.produced:,} events in {wave.elapsed:.1f}s = "
        f"{wave.rate:,.0f} events/s"
        + ("" if wave.drained else f"  (NOT drained within {args.drain_timeout:.0f}s)")
    )
    print(
        f"    decision latency (trigger produced -> decision received): p50 {p50:,.0f} ms, "
        f"p99 {p99:,.0f} ms over {len(wave.latencies):,} triggering events"
        + (" (unlimited rate: includes the backlog)" if not args.rate else "")
    )
    print(
        f"    decisions: expected {wave.expected:,} on produced events, received on "
        f"{wave.received:,} events; triggering events without a decision {wave.missing:,}, "
        f"decisions on unexpected events {wave.unexpected:,}"
    )
    for i, pid in enumerate(pids):
        print(
            f"    worker {i} (pid {pid}) RSS: before {mb(wave.rss_before[i])}, peak "
            f"{mb(wave.rss_peak[i])}, after runs ended {mb(wave.rss_ended[i])}"
            + (f", after expiry {mb(wave.rss_expired[i])}" if wave.rss_expired else "")
        )
    n = len(pids)
    total = sum(v or 0 for v in wave.rss_before[:n])
    print(
        f"    all workers RSS: before {mb(total)}, peak {mb(sum(wave.rss_peak[:n]))}, after "
        f"runs ended {mb(sum(v or 0 for v in wave.rss_ended[:n]))}"
        + (
            f", after expiry {mb(sum(v or 0 for v in wave.rss_expired[:n]))}"
            if wave.rss_expired
            else ""
        )
        + f"; peak - before = {(sum(wave.rss_peak[:n]) - total) / 1024:,.0f} MB"
    )
    print(
        f"    broker ({args.broker}) RSS: before {mb(sum(v or 0 for v in wave.rss_before[n:]))}, "
        f"after runs ended {mb(sum(v or 0 for v in wave.rss_ended[n:]))}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--runs", type=int, default=2000, help="runs per wave (default 2000)")
    parser.add_argument(
        "--events", type=int, default=60_000, help="events per wave (default 60000)"
    )
    parser.add_argument(
        "--seconds", type=float, default=300.0, help="max producing time per wave (300)"
    )
    parser.add_argument("--rate", type=float, default=0, help="offered events/s (0 = unlimited)")
    parser.add_argument("--concurrency", type=int, help="runs in flight at once (default all)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (default 4)")
    parser.add_argument(
        "--idle-ttl", type=float, default=30.0, help="workers' LOOPGUARD_RUN_IDLE_TTL (default 30)"
    )
    parser.add_argument(
        "--expiry-wait",
        type=float,
        help="wait after each wave for ended runs to expire "
        "(default min(idle-ttl, 300) + 2 timer ticks; 0 = skip)",
    )
    parser.add_argument(
        "--waves", type=int, default=1, help="repeat the load with new runs (memory reuse)"
    )
    parser.add_argument("--drain-timeout", type=float, default=600.0, help="max wait to drain")
    parser.add_argument("--db", help="audit DB URL (default: SQLite in a temp dir)")
    parser.add_argument("--progress", type=float, default=5.0, help="progress line every N s")
    parser.add_argument(
        "--run-mem", type=int, default=10_000, help="K runs for tracemalloc (0 = skip)"
    )
    parser.add_argument("--no-changelog-scan", action="store_true", help="skip table sizes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    add_broker_arg(parser)
    args = parser.parse_args()
    args.concurrency = args.concurrency or args.runs
    expiry_wait = args.expiry_wait
    if expiry_wait is None:
        expiry_wait = min(args.idle_ttl, 300.0) + 2 * EXPIRE_TIMER_INTERVAL + 2

    tmp = Path(tempfile.mkdtemp(prefix="loopguard-load-"))
    db_url = args.db or f"sqlite:///{tmp / 'audit.db'}"
    config_file = tmp / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    broker = start_broker(args.broker, tmp)
    workers: list = []
    heard = Decisions()
    sampler = client = producer = None
    waves: list[Wave] = []
    sizes = None
    try:
        settings = Settings.for_profile(
            broker.profile, broker=broker.url, partitions=args.partitions, app_id=APP_ID
        )
        ensure_topics(settings)
        workers = start_workers(
            broker,
            args.workers,
            tmp,
            db_url=db_url,
            config_file=config_file,
            partitions=args.partitions,
            app_id=APP_ID,
            env={"LOOPGUARD_RUN_IDLE_TTL": str(args.idle_ttl)},
        )
        client = GatewayClient(
            broker.bootstrap,
            "load-gw",
            on_decision=heard,
            fetch_max_wait_ms=gateway_fetch_wait_ms(broker.profile),
        )
        wait_until_processing(client, workers=workers, timeout=120)
        # Every partition processing (all workers joined): one compaction loop per partition.
        for round_no in range(2):
            warm = sentinel_ids(f"warm{round_no}", args.partitions)
            for run_id in warm:
                for event in compaction_loop_run(run_id):
                    client.publish(event)
            client.flush()
            if not heard.wait_runs(warm, 120):
                raise RuntimeError(f"warm-up runs not decided; see {tmp}/*worker-*.log")
            time.sleep(1)
        pids = [w.process.pid for w in workers]
        sampler = RssSampler([*pids, *broker_pids(broker)])  # the broker's last
        sampler.start()
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap, linger_ms=5, acks=1, batch_size=256 * 1024
        )
        for number in range(args.waves):
            waves.append(
                run_wave(
                    args, number, producer, settings.topics.events, heard, sampler, expiry_wait
                )
            )
        hwm = [rss_kb(pid, "VmHWM") for pid in pids]
        alive = [w.alive for w in workers]
        rebalances = [
            w.log_path.read_text(errors="replace").count("Executing _on_partitions_assigned")
            for w in workers
        ]
        if not args.no_changelog_scan:
            marks = {}
            for wave in waves:
                marks[f"wave {wave.number} ended"] = wave.ended_wall
                marks[f"wave {wave.number} expired"] = wave.expired_wall
            sizes = table_sizes(broker.bootstrap, f"{APP_ID}-runs-changelog", marks, args.idle_ttl)
    finally:
        if sampler:
            sampler.stop()
        if producer:
            producer.close()
        if client:
            client.close()
        for worker in workers:
            worker.stop()
        broker.stop()

    per_run = serialised = mem_seconds = None
    if args.run_mem:
        per_run, serialised, mem_seconds = memory_per_run(args.run_mem, args.seed)

    print()
    print(
        f"loopguard load: {args.workers} worker(s), {args.partitions} partitions, broker "
        f"{args.broker}, {'SQLite' if not args.db else 'DB ' + args.db.split('://')[0]}, loopback, "
        f"LOOPGUARD_RUN_IDLE_TTL={args.idle_ttl:g}"
    )
    for wave in waves:
        report_wave(args, wave, pids, hwm)
    print(
        "  workers: "
        + "; ".join(
            f"{i}: alive={alive[i]}, partition assignments={rebalances[i]}, VmHWM {mb(hwm[i])}"
            for i in range(len(pids))
        )
    )
    if sizes:
        print(
            f"  runs table, rebuilt from its changelog ({sizes['records']:,} records, "
            f"{sizes['bytes'] / 1_048_576:,.0f} MB, {sizes['tombstones']:,} tombstones; "
            f"{sizes['recreated']:,} runs written again after being expired, "
            f"{sizes['long_gaps']:,} runs with > {args.idle_ttl:g}s between two writes): "
            f"peak {sizes['peak']:,} runs; "
            + ", ".join(f"{name}: {sizes[name]:,}" for name in sizes if name.startswith("wave "))
        )
    if per_run is not None:
        print(
            f"  memory per active run (in-process, tracemalloc, {args.run_mem:,} RunStates "
            f"with 30-call histories): {per_run:,.0f} bytes/run = "
            f"{per_run * 10_000 / 1_048_576:,.0f} MB per 10,000 active runs; changelog "
            f"value {serialised:,.0f} bytes/run (measured in {mem_seconds:.0f}s)"
        )
    print(f"  logs: {tmp}")
    if args.json:
        print(
            json.dumps(
                {
                    "workers": args.workers,
                    "rate_offered": args.rate,
                    "waves": [
                        {
                            "events": w.produced,
                            "runs": len(w.plan.run_ids),
                            "e2e_events_per_s": round(w.rate),
                            "drained": w.drained,
                            "latency_p50_ms": round(statistics.median(w.latencies), 1)
                            if w.latencies
                            else None,
                            "latency_p99_ms": round(percentile(w.latencies, 0.99), 1),
                            "decisions_expected": w.expected,
                            "missing_triggers": w.missing,
                            "rss_before_kb": w.rss_before,
                            "rss_peak_kb": w.rss_peak,
                            "rss_ended_kb": w.rss_ended,
                            "rss_expired_kb": w.rss_expired,
                        }
                        for w in waves
                    ],
                    "rss_hwm_kb": hwm,
                    "table": sizes,
                    "bytes_per_run": None if per_run is None else round(per_run),
                    "changelog_bytes_per_run": None if serialised is None else round(serialised),
                }
            )
        )
    return 0 if all(w.drained for w in waves) and all(alive) else 1


if __name__ == "__main__":
    sys.exit(main())
