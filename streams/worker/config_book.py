"""Resolved config per agent: the worker's config file plus run-time overrides."""

from __future__ import annotations

from typing import Any, Protocol

from streams.core.config import LoopDetectionConfig
from streams.core.fleet import GLOBAL_KEY, FleetConfig


class Overrides(Protocol):
    """The config topic as the worker follows it (:class:`streams.kafka.config_topic`)."""

    version: int

    def get(self, key: str) -> dict[str, Any] | None: ...


class ConfigBook:
    """Merges the fleet config with the newest override blocks; cached per overrides version."""

    def __init__(self, fleet: FleetConfig, overrides: Overrides) -> None:
        self.fleet = fleet
        self.overrides = overrides
        self._cache: dict[tuple[str, int], LoopDetectionConfig] = {}

    def for_agent(self, agent_id: str) -> LoopDetectionConfig:
        key = (agent_id, self.overrides.version)
        cfg = self._cache.get(key)
        if cfg is None:
            fleet = self.fleet
            for override in (GLOBAL_KEY, agent_id):
                block = self.overrides.get(override)
                if block is not None:
                    fleet = fleet.with_override(override, block)
            cfg = self._cache[key] = fleet.for_agent(agent_id)
        return cfg
