"""The per-agent configs are bounded (issue 26, item 7; issue 40, item 6): agent ids come from
events, so anyone can invent 100,000 of them. Agents without a block of their own share one
config, resolved once per overrides version; the others are cached in an LRU bounded in
entries and in config objects (a config plus its per-tool views)."""

from __future__ import annotations

import tracemalloc

from streams.core.fleet import GLOBAL_KEY, FleetConfig, override_record
from streams.kafka.config_topic import ConfigOverrides
from streams.service.config_book import CONFIG_CACHE_SIZE, ConfigBook, config_cost


def book(cache_size: int = CONFIG_CACHE_SIZE) -> tuple[ConfigBook, ConfigOverrides]:
    overrides = ConfigOverrides()
    return ConfigBook(FleetConfig({"enabled": True}, {}), overrides, cache_size), overrides


def big_table(tools: int = 3300) -> dict:
    entry = {"warningThreshold": 5, "exempt": ["pingPong"], "volatileFields": ["$.d.ms"]}
    return {f"tool_{n:04d}": dict(entry) for n in range(tools)}


def test_thirty_thousand_agent_ids_share_one_config() -> None:
    configs, _ = book()
    shared = configs.for_agent("agent-0")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(30_000):
            assert configs.for_agent(f"agent-{i}") is shared
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(configs) == 0  # nothing cached per invented id
    assert grown < 64 * 1024, f"{grown / 2**10:.1f} KiB"


def test_a_new_agent_does_not_copy_the_global_per_tool_table() -> None:
    """Issue 40: a 3,300-tool * table, then invented agent ids: each one is the very same
    resolved config, its per-tool views included (0.8 s and 12.5 MB per id before)."""
    configs, overrides = book()
    overrides.apply(GLOBAL_KEY, override_record({"enabled": True, "perTool": big_table()}))
    first = configs.for_agent("invented-1")
    assert len(first.per_tool) == 3300
    second = configs.for_agent("invented-2")
    assert second is first and second.per_tool is first.per_tool


def test_agents_with_a_block_share_the_tools_they_do_not_override() -> None:
    configs, overrides = book()
    overrides.apply(GLOBAL_KEY, override_record({"enabled": True, "perTool": big_table(50)}))
    overrides.apply("a", override_record({"warningThreshold": 3}))
    overrides.apply("b", override_record({"perTool": {"tool_0001": {"warningThreshold": 7}}}))
    shared, a, b = (configs.for_agent(key) for key in ("x", "a", "b"))
    assert a.warning_threshold == 3 and b.per_tool["tool_0001"].warning_threshold == 7
    # the parsed settings of a tool (its volatile paths) are one object for every agent
    assert a.per_tool["tool_0002"].volatile is shared.per_tool["tool_0002"].volatile
    assert b.per_tool["tool_0002"].volatile is shared.per_tool["tool_0002"].volatile


def test_the_cache_is_bounded_in_config_objects() -> None:
    overrides = ConfigOverrides()
    overrides.apply(GLOBAL_KEY, override_record({"enabled": True, "perTool": big_table(100)}))
    configs = ConfigBook(FleetConfig(), overrides, cache_size=4096, cache_cost=350)
    for n in range(10):
        overrides.apply(f"own-{n}", override_record({"warningThreshold": 3}))
    for n in range(10):
        configs.for_agent(f"own-{n}")
    assert config_cost(configs.for_agent("own-9")) == 101
    assert len(configs) == 3 and configs.cost == 303 <= 350


def test_an_override_that_does_not_resolve_leaves_the_agent_guarded() -> None:
    """A block the follower accepted but that fails to merge never fails the agent's events:
    it is logged and the agent gets the global config."""

    class Raw:
        version = 1

        def get(self, key: str) -> dict | None:
            return {"incidents": {"enabled": True}} if key == "a" else None

    configs = ConfigBook(FleetConfig({"enabled": True}, {}), Raw())
    assert configs.for_agent("a") is configs.for_agent("someone-else")


def test_least_recently_used_agent_goes_first() -> None:
    configs, overrides = book(cache_size=2)
    for agent in ("a", "b", "c"):
        overrides.apply(agent, override_record({"warningThreshold": 4}))
    a = configs.for_agent("a")
    b = configs.for_agent("b")
    assert configs.for_agent("a") is a  # cached; now the most recent
    configs.for_agent("c")  # evicts b, not a
    assert configs.for_agent("a") is a
    assert configs.for_agent("b") is not b  # resolved again
    assert len(configs) == 2


def test_a_new_overrides_version_empties_the_cache_and_applies() -> None:
    configs, overrides = book()
    for agent in ("a", "b", "c"):
        assert configs.for_agent(agent).warning_threshold != 4
    overrides.apply("b", override_record({"warningThreshold": 4}))
    assert configs.for_agent("b").warning_threshold == 4
    assert len(configs) == 1  # the older version's configs are gone
    overrides.apply(GLOBAL_KEY, override_record({"enabled": False}))
    assert configs.for_agent("a").enabled is False
    assert configs.for_agent("b").warning_threshold == 4 and not configs.for_agent("b").enabled
