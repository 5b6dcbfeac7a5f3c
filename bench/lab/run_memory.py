"""Memory per active run, measured in-process: RunStates with 30-call histories built through
LoopGuard under tracemalloc, and their changelog form's size."""

from __future__ import annotations

import gc
import random
import statistics
import time
import tracemalloc

from bench.lab.harness import CONFIG
from bench.lab.run_plans import RunBuilder
from streams.core.engine import LoopGuard
from streams.core.events import RunStarted
from streams.core.fleet import fleet_from_document
from streams.worker.state_codec import RunStateCodec


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
