"""What per-agent configs cost in memory (issue 40), measured with tracemalloc, no broker.

A ``*`` override with a large ``perTool`` table (issue 40's attack: 3,300 tools, 685 KB),
then events from many invented agent ids: each one must cost nothing but its lookup, since
they all share the global config. Agents with a block of their own each hold their config
and one view per tool, in a cache bounded by ``CONFIG_CACHE_COST`` config objects: the bytes
per config object measured here are what that bound means in memory.
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
from typing import Any

from streams.core.engine import core_build
from streams.core.fleet import GLOBAL_KEY, FleetConfig, override_record
from streams.kafka.config_topic import ConfigOverrides
from streams.service.config_book import ConfigBook


def tool_table(tools: int) -> dict[str, Any]:
    """``perTool`` entries of about 200 bytes each, every field used."""
    return {
        f"tool_{n:05d}_of_the_gateway": {
            "warningThreshold": 5,
            "criticalThreshold": 9,
            "exempt": ["pingPong"],
            "volatileFields": ["$.details.durationMs", "$.details.pid"],
            "ignoredArgs": ["$.requestId"],
        }
        for n in range(tools)
    }


def measured(work: Any) -> int:
    """Bytes still allocated after ``work()`` (tracemalloc, Python objects)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Memory per new agent id and per agent override, with a large global "
        "perTool table (issue 40); tracemalloc, no broker, no timings."
    )
    parser.add_argument("--tools", type=int, default=3300, help="tools in the * perTool table")
    parser.add_argument("--agents", type=int, default=2000, help="new agent ids resolved")
    parser.add_argument("--overrides", type=int, default=40, help="agents with a block each")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    overrides = ConfigOverrides()
    record = override_record({"enabled": True, "perTool": tool_table(args.tools)})
    overrides.apply(GLOBAL_KEY, record)
    book = ConfigBook(FleetConfig(), overrides)
    shared = book.for_agent("warm-up")  # the version's shared config, resolved once

    def new_agents() -> None:
        for n in range(args.agents):
            book.for_agent(f"invented-{n}")

    per_new_agent = measured(new_agents) / args.agents
    sharing = book.for_agent("invented-0") is shared
    for n in range(args.overrides):
        overrides.apply(f"own-{n}", override_record({"warningThreshold": 3 + n % 5}))
    book.for_agent("warm-up")  # a new version: the shared config again, outside the measure

    def own_agents() -> None:
        for n in range(args.overrides):
            book.for_agent(f"own-{n}")

    held = measured(own_agents)
    objects = getattr(book, "cost", 0)  # the cache's bound in config objects (issue 40)
    result = {
        "core": core_build(),
        "record_bytes": len(record),
        "tools": args.tools,
        "bytes_per_new_agent": round(per_new_agent, 1),
        "new_agents_share_one_config": sharing,
        "agents_with_own_block": args.overrides,
        "cached": len(book),
        "cache_cost_objects": objects,
        "cache_cost_bound": getattr(book, "cache_cost", 0),
        "cache_bytes": held,
        "bytes_per_cached_agent": round(held / max(1, len(book))),
        "bytes_per_config_object": round(held / max(1, objects), 1),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            shown = f"{value:,}" if type(value) in (int, float) else str(value)
            print(f"{key:<30} {shown}")
    return 0
