"""What a flood of the schemas topic costs a worker in memory (issue 40 item 7), measured
with tracemalloc, no broker, no timings.

30,000 valid schemas on the schemas topic grew a worker from 135 to 379 MB: its registry
kept every schema it read. Here the same number of distinct, valid writer schemas (each an
evolution of our AgentEvent schema, as a gateway would publish) goes into a registry bounded
as the worker's is (``MAX_WRITER_SCHEMAS``) and into one with no bound, and the schemas
topic's index of schemas read but not asked for is filled to its bound (``MAX_INDEXED``).
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
from collections import OrderedDict
from typing import Any

from streams.kafka.schema_topic import MAX_INDEXED
from streams.wire.schema_registry import (
    MAX_WRITER_SCHEMAS,
    SCHEMA_DIR,
    SchemaRegistry,
    parse_schema_text,
)


def flood(count: int) -> list[str]:
    """``count`` distinct AgentEvent evolutions: our schema plus one optional field each."""
    schema = json.loads((SCHEMA_DIR / "AgentEvent.avsc").read_text(encoding="utf-8"))
    texts = []
    for n in range(count):
        extra = {"name": f"flood_{n}", "type": ["null", "string"], "default": None}
        texts.append(json.dumps({**schema, "fields": [*schema["fields"], extra]}))
    return texts


def measured(work: Any) -> tuple[int, Any]:
    """Bytes still allocated after ``work()`` (tracemalloc, Python objects), and its result."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = work()
        return tracemalloc.get_traced_memory()[0] - before, kept
    finally:
        tracemalloc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Memory a flood of valid writer schemas takes in a bounded registry and "
        "in an unbounded one, and the schemas topic's index at its bound (issue 40); "
        "tracemalloc, no broker, no timings."
    )
    parser.add_argument("--schemas", type=int, default=30_000, help="distinct schemas")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    texts = flood(args.schemas)
    sample = min(200, args.schemas)
    per_schema, _ = measured(lambda: [parse_schema_text(t) for t in texts[:sample]])

    def fill(bound: int) -> SchemaRegistry:
        registry = SchemaRegistry(max_schemas=bound)
        for text in texts:
            registry.register(text)
        return registry

    bounded, kept = measured(lambda: fill(MAX_WRITER_SCHEMAS))
    unbounded, _ = measured(lambda: fill(args.schemas))

    def index() -> OrderedDict[bytes, tuple[int, int]]:
        noted: OrderedDict[bytes, tuple[int, int]] = OrderedDict()
        for n in range(MAX_INDEXED):
            noted[n.to_bytes(8, "little")] = (n % 4, 1_000_000 + n)
        return noted

    index_bytes, _ = measured(index)
    figures = {
        "schemas": args.schemas,
        "schema_text_bytes": len(texts[0]),
        "bytes_per_parsed_schema": per_schema // sample,
        "max_writer_schemas": MAX_WRITER_SCHEMAS,
        "bounded_registry_bytes": bounded,
        "bounded_registry_kept": len(kept) - len(SchemaRegistry()),
        "unbounded_registry_bytes": unbounded,
        "max_indexed": MAX_INDEXED,
        "full_index_bytes": index_bytes,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        mb = 1024 * 1024
        print(f"{args.schemas} valid schemas of {len(texts[0])} characters each")
        print(f"  one parsed schema: {per_schema // sample / 1024:.1f} KiB")
        print(
            f"  registry bounded at {MAX_WRITER_SCHEMAS}: {bounded / mb:.1f} MiB "
            f"({figures['bounded_registry_kept']} kept)"
        )
        print(f"  registry without a bound: {unbounded / mb:.1f} MiB")
        print(f"  schemas topic index at its bound ({MAX_INDEXED}): {index_bytes / mb:.1f} MiB")
    return 0
