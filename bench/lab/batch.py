"""The guarding path's CPU per event without a broker: ``process_batch`` over the throughput
bench's workload.

The worker's guarding agent spends its time in :func:`streams.service.batch.process_batch`
(decoding, the core, state and watermark encoding, records) plus Faust's per-record path and
the producer. This bench times the first alone, on the same events as ``throughput_bench``
(``--runs`` runs interleaved round robin, so nearly every event touches a run of its own in
its batch), in batches of ``--batch`` messages, over a dict standing in for the runs table.
It prints CPU per event (``time.process_time``) per pass; ``--profile`` adds cProfile's
heaviest functions, to see where a change should go.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import time
from dataclasses import dataclass

from aiokafka.partitioner import murmur2

from bench.lab.harness import CONFIG
from bench.lab.run_plans import make_plan
from streams.core.fleet import fleet_from_document
from streams.core.run_state import RunState
from streams.service.batch import BatchTopics, process_batch
from streams.service.config_book import ConfigBook
from streams.service.processor import EventProcessor
from streams.service.records import BatchContext
from streams.wire.schema_registry import default_registry
from streams.worker.gc_tuning import tune_collector

TOPICS = BatchTopics(
    events="events", control="control", deadletter="deadletter", changelog="runs-changelog"
)


@dataclass(frozen=True, slots=True)
class BenchMessage:
    """A consumed events-topic message, as Faust's ``Message`` carries it."""

    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
    timestamp: float
    headers: tuple = ()


class Partitions:
    """The producer's murmur2 partitioner, cached per (topic, key) like the worker's."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.cache: dict[tuple[str, bytes], int] = {}

    def __call__(self, topic: str, key: bytes | None) -> int:
        if key is None:
            return 0
        cached = self.cache.get((topic, key))
        if cached is None:
            cached = (murmur2(key) & 0x7FFFFFFF) % self.partitions
            self.cache[(topic, key)] = cached
        return cached


class NoOverrides:
    """The config topic with nothing published on it."""

    version = 0

    def get(self, key: str) -> None:
        return None


def messages_of(plan, partitions: Partitions) -> list[BenchMessage]:
    offsets = [0] * partitions.partitions
    out = []
    now = time.time()
    for key, value in zip(plan.keys, plan.values, strict=True):
        partition = partitions("events", key)
        out.append(BenchMessage("events", partition, offsets[partition], key, value, now))
        offsets[partition] += 1
    return out


def one_pass(messages: list[BenchMessage], batch: int, partitions: int) -> tuple[float, dict]:
    """CPU seconds to decide every message in batches, and what came out (for a check)."""
    configs = ConfigBook(fleet_from_document(CONFIG), NoOverrides())  # the worker's
    table: dict[bytes, RunState] = {}
    processor = EventProcessor(table.get, configs.for_agent, republish_duplicates=False)
    context = BatchContext(default_registry(), Partitions(partitions), 1_048_576)
    counts = {"decisions": 0, "records": 0, "state_writes": 0}
    gc.collect()
    gc.freeze()  # as the worker after its start (streams.worker.gc_tuning)
    started = time.process_time()
    for start in range(0, len(messages), batch):
        out = process_batch(
            messages[start : start + batch], processor, context, TOPICS, now=time.time()
        )
        for write in out.state_writes:
            table[write.key] = write.state
        counts["decisions"] += len(out.decisions)
        counts["records"] += out.record_count()
        counts["state_writes"] += len(out.state_writes)
    return time.process_time() - started, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="events (100000)")
    parser.add_argument("--runs", type=int, default=10_000, help="runs interleaved (10000)")
    parser.add_argument("--batch", type=int, default=500, help="messages per batch (500)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions (4)")
    parser.add_argument("--repeat", type=int, default=5, help="passes (5)")
    parser.add_argument("--seed", type=int, default=1, help="workload seed (1)")
    parser.add_argument("--profile", type=int, default=0, help="print the N heaviest functions")
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    plan_args = argparse.Namespace(
        runs=args.runs, events=args.events, seed=args.seed, concurrency=args.runs
    )
    plan = make_plan(plan_args, 0, 0)
    tune_collector()  # the worker's collector settings
    partitions = Partitions(args.partitions)
    messages = messages_of(plan, partitions)
    import streams.core.engine as engine  # which build of the core ran

    build = "mypyc" if engine.__file__.endswith((".so", ".pyd")) else "interpreted"
    print(
        f"{len(messages):,} events, {args.runs:,} runs interleaved, batches of {args.batch}, "
        f"core {build}"
    )
    per_event = []
    counts: dict = {}
    for index in range(args.repeat):
        seconds, counts = one_pass(messages, args.batch, args.partitions)
        per_event.append(seconds / len(messages) * 1e6)
        print(f"  pass {index + 1}: {per_event[-1]:.1f} us CPU per event", flush=True)
    print(
        f"process_batch: best {min(per_event):.1f}, median {statistics.median(per_event):.1f} "
        f"us CPU per event; {counts['decisions']:,} decisions, {counts['records']:,} records, "
        f"{counts['state_writes']:,} state writes per pass"
    )
    end = os.getloadavg()
    print(f"load average at the end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        one_pass(messages, args.batch, args.partitions)
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile)
    if args.json:
        print(
            json.dumps(
                {
                    "events": len(messages),
                    "batch": args.batch,
                    "core": build,
                    "us_per_event": per_event,
                    "load_start": load,
                    "load_end": end,
                    **counts,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
