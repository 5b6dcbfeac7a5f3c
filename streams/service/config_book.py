"""Resolved config per agent: the worker's config file plus run-time overrides.

Every event needs its agent's config, and anyone can invent an agent id in an event, so what
an unknown agent costs must not grow with the number of ids. An agent without a block of its
own (in the file or on the config topic) gets the one shared config of the global block,
resolved once per overrides version (issue 40: each new id resolved the whole ``*`` block
again and copied its ``perTool`` table, 0.8 s and 12.5 MB per id with 3,300 tools). Agents
with a block of their own are cached in an LRU bounded by entries (``CONFIG_CACHE_SIZE``) and
by cost (``CONFIG_CACHE_COST``: config objects held, a config plus one per-tool view each).
A new overrides version empties the cache.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Protocol

from streams.core.config import LoopDetectionConfig
from streams.core.fleet import GLOBAL_KEY, FleetConfig

log = logging.getLogger("loopguard.config")

CONFIG_CACHE_SIZE = 4096  # agents with a block of their own
# Config objects the cache holds at most: an agent's config plus one view per perTool tool
# (streams.core.config.tool_view), about 0.58 KB each (bench/config_bench.py; docs/
# hardening.md, "Issue 40 — config changes"): about 38 MB, whatever the tables are.
CONFIG_CACHE_COST = 65_536


def config_cost(cfg: LoopDetectionConfig) -> int:
    """What a resolved config holds, in config objects: itself and its per-tool views."""
    return 1 + len(cfg.per_tool)


class Overrides(Protocol):
    """The config topic as the worker follows it (:class:`streams.kafka.config_topic`)."""

    version: int

    def get(self, key: str) -> dict[str, Any] | None: ...


class ConfigBook:
    """Merges the fleet config with the newest override blocks: one shared config for the
    agents without a block of their own, a bounded per-version cache for the others."""

    def __init__(
        self,
        fleet: FleetConfig,
        overrides: Overrides,
        cache_size: int = CONFIG_CACHE_SIZE,
        cache_cost: int = CONFIG_CACHE_COST,
    ) -> None:
        self.fleet = fleet
        self.overrides = overrides
        self.cache_size = max(1, int(cache_size))
        self.cache_cost = max(1, int(cache_cost))
        self._cache: OrderedDict[str, tuple[LoopDetectionConfig, int]] = OrderedDict()
        self._cost = 0
        self._version: int | None = None
        self._base = fleet  # the fleet with the newest ``*`` override applied
        self._shared: LoopDetectionConfig | None = None

    def __len__(self) -> int:
        """Configs of agents with a block of their own cached now (at most ``cache_size``)."""
        return len(self._cache)

    @property
    def cost(self) -> int:
        """Config objects the cache holds now (at most ``cache_cost``, or one entry's)."""
        return self._cost

    def _refresh(self) -> FleetConfig:
        version = self.overrides.version
        if version != self._version:  # every cached config belongs to an older version
            self._cache.clear()
            self._cost = 0
            self._version = version
            self._shared = None
            block = self.overrides.get(GLOBAL_KEY)
            self._base = self.fleet
            if block is not None:
                self._base = self._guarded(lambda: self.fleet.with_override(GLOBAL_KEY, block))
        return self._base

    def _guarded(self, build: Any) -> Any:
        """``build()``; a failure (a block the follower accepted but that does not resolve)
        is logged and leaves the file's config in force instead of failing every event."""
        try:
            return build()
        except Exception as exc:  # noqa: BLE001 - never fail the events for a config record
            log.error("config override ignored, it does not resolve: %s", exc)
            return self.fleet

    def shared(self) -> LoopDetectionConfig:
        """The config of every agent without a block of its own, resolved once a version."""
        base = self._refresh()
        if self._shared is None:
            try:
                self._shared = base.for_agent(GLOBAL_KEY)
            except Exception as exc:  # noqa: BLE001 - as _guarded
                log.error("the global config override does not resolve: %s", exc)
                self._shared = self.fleet.for_agent(GLOBAL_KEY)
        return self._shared

    def for_agent(self, agent_id: str) -> LoopDetectionConfig:
        base = self._refresh()
        own = self.overrides.get(agent_id) if agent_id != GLOBAL_KEY else None
        if own is None and agent_id not in base.agent_blocks:
            return self.shared()
        hit = self._cache.get(agent_id)
        if hit is not None:
            self._cache.move_to_end(agent_id)
            return hit[0]
        try:
            fleet = base if own is None else base.with_override(agent_id, own, warn=False)
            cfg = fleet.for_agent(agent_id)
        except Exception as exc:  # noqa: BLE001 - as _guarded: the agent gets the global config
            log.error("config override of %s ignored, it does not resolve: %s", agent_id, exc)
            cfg = self.shared()
        cost = config_cost(cfg)
        self._cache[agent_id] = (cfg, cost)
        self._cost += cost
        while len(self._cache) > 1 and (
            len(self._cache) > self.cache_size or self._cost > self.cache_cost
        ):
            _agent, (_cfg, freed) = self._cache.popitem(last=False)
            self._cost -= freed
        return cfg

    def resolve_uncached(self, key: str) -> LoopDetectionConfig:
        """``key``'s config (an agent id, or ``*``: agents without an override) without the
        cache and without logging the fleet's warnings: safe from another thread (the config
        follower's, for the versions and the effect it records)."""
        fleet = self.fleet
        for override in dict.fromkeys((GLOBAL_KEY, key)):
            block = self.overrides.get(override)
            if block is not None:
                fleet = fleet.with_override(override, block, warn=False)
        return fleet.for_agent(key)
