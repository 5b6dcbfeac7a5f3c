"""The per-agent config cache is bounded (issue 26, item 7): agent ids come from events, so
anyone can invent 100,000 of them; the cache keeps the most recent ``cache_size`` agents of
the current overrides version and resolves the others again when they come back."""

from __future__ import annotations

import tracemalloc

from streams.core.fleet import GLOBAL_KEY, FleetConfig, override_record
from streams.kafka.config_topic import ConfigOverrides
from streams.service.config_book import CONFIG_CACHE_SIZE, ConfigBook


def book(cache_size: int = CONFIG_CACHE_SIZE) -> tuple[ConfigBook, ConfigOverrides]:
    overrides = ConfigOverrides()
    return ConfigBook(FleetConfig({"enabled": True}, {}), overrides, cache_size), overrides


def test_thirty_thousand_agent_ids_keep_the_cache_at_its_bound() -> None:
    configs, _ = book()
    tracemalloc.start()
    try:
        configs.for_agent("agent-0")
        before = tracemalloc.get_traced_memory()[0]
        for i in range(30_000):
            configs.for_agent(f"agent-{i}")
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(configs) == CONFIG_CACHE_SIZE
    # Unbounded: 22 MiB here (74 MiB for 100,000 ids); bounded: about 3 MiB.
    assert grown < 10 * 1024 * 1024, f"{grown / 2**20:.1f} MiB"


def test_least_recently_used_agent_goes_first() -> None:
    configs, _ = book(cache_size=2)
    a = configs.for_agent("a")
    configs.for_agent("b")
    assert configs.for_agent("a") is a  # cached; now the most recent
    configs.for_agent("c")  # evicts b, not a
    assert configs.for_agent("a") is a
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
