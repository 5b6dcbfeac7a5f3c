"""The fleet's config: the global ``tools.loopDetection`` block plus per-agent overrides, read
from a gateway config file and changed at run time by override records on the config topic.

Each agent's block resolves through :func:`streams.core.config.resolve`; invalid input raises
:class:`ConfigError` naming the field, as everywhere.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.core.config import (
    LoopDetectionConfig,
    check_block,
    config_warnings,
    merge_blocks,
    resolve,
)
from streams.core.config_defaults import DEFAULTS
from streams.core.config_error import ConfigError, closest
from streams.core.config_files import read_config_file
from streams.core.config_limits import check_limits, load_record
from streams.core.incident_config import INCIDENTS, IncidentConfig
from streams.core.tool_config import PER_TOOL

log = logging.getLogger("loopguard.config")


def fleet_warnings(fleet: FleetConfig) -> list[str]:
    """:func:`config_warnings` of the global block and of every agent, with their paths, and
    a fleet whose rolling detectors are on nowhere (a config that guards next to nothing)."""
    found = [
        f"tools.loopDetection: {text}" for text in config_warnings(resolve(fleet.global_block))
    ]
    if not resolve(fleet.global_block).rolling_detectors_on and not any(
        fleet.for_agent(agent_id).rolling_detectors_on for agent_id in fleet.agent_blocks
    ):
        found.append(
            "enabled is true in no block: the loop detectors are off for every agent, only "
            "the post-compaction guard runs (set tools.loopDetection.enabled: true)"
        )
    for agent_id in sorted(fleet.agent_blocks):
        path = override_path(agent_id)
        found += [f"{path}: {text}" for text in config_warnings(fleet.for_agent(agent_id))]
    return found


def log_fleet_warnings(fleet: FleetConfig) -> None:
    for text in fleet_warnings(fleet):
        log.warning("%s", text)


@dataclass(frozen=True)
class FleetConfig:
    """The global block plus per-agent overrides, as found in a gateway config file."""

    global_block: dict[str, Any] = field(default_factory=dict)
    agent_blocks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def for_agent(self, agent_id: str) -> LoopDetectionConfig:
        override = self.agent_blocks.get(agent_id)
        if override is None:
            return resolve(self.global_block)
        path = f"agents.list[id={agent_id}].tools.loopDetection"
        return resolve(merge_blocks(self.global_block, check_block(override, path)), path)

    @property
    def incidents(self) -> IncidentConfig:
        """The fleet's loop-incident settings (issue 28): the global block's alone."""
        return resolve(self.global_block).incidents

    def with_agent(self, agent_id: str, block: dict[str, Any] | None) -> FleetConfig:
        """A copy with one agent's override replaced (``None`` removes it)."""
        agents = dict(self.agent_blocks)
        if block is None:
            agents.pop(agent_id, None)
        else:
            path = f"agents.list[id={agent_id}].tools.loopDetection"
            no_agent_incidents(check_block(block, path), path)
            agents[agent_id] = block
        return FleetConfig(self.global_block, agents)

    def with_override(self, key: str, block: dict[str, Any], warn: bool = True) -> FleetConfig:
        """A copy with one run-time override applied: ``*`` replaces the global block, an
        agent id that agent's block (as the workers apply the config topic). Logs the
        thresholds the result can never reach (:func:`config_warnings`) unless ``warn`` is
        false (resolving every agent of the fleet again is not free: issue 40)."""
        if key == GLOBAL_KEY:
            fleet = FleetConfig(check_block(block, override_path(key)), self.agent_blocks)
        else:
            fleet = self.with_agent(key, block)
        if warn:
            log_fleet_warnings(fleet)
        return fleet

    def to_document(self) -> dict[str, Any]:
        return {
            "tools": {"loopDetection": self.global_block},
            "agents": {
                "list": [
                    {"id": agent_id, "tools": {"loopDetection": block}}
                    for agent_id, block in sorted(self.agent_blocks.items())
                ]
            },
        }


def no_agent_incidents(block: dict[str, Any], path: str) -> None:
    """Incidents span agents, so only the global block may set ``incidents``."""
    if INCIDENTS in block:
        raise ConfigError(
            f"{path}.{INCIDENTS}: incidents are fleet-wide; set them in tools.loopDetection"
        )


def _object_or_empty(value: Any, path: str) -> dict[str, Any]:
    """An optional object: absent/null means empty, anything but an object is an error."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected an object, got {type(value).__name__}")
    return value


def _near_miss(container: dict[str, Any], name: str, where: str, holds: tuple[str, ...]) -> None:
    """Refuse a key of ``container`` that is a typo of ``name`` (case or difflib) and holds
    what ``name`` would (one of ``holds`` inside, or anything when ``holds`` is empty): a
    gateway's config has many keys loopguard never reads, so only a block that would be
    silently lost is refused, naming the key meant."""
    for key, value in container.items():
        if key == name or closest(key, [name], cutoff=0.75) is None:
            continue
        if holds and not (isinstance(value, dict) and any(h in value for h in holds)):
            continue
        path = f"{where}.{key}" if where else str(key)
        raise ConfigError(f'{path}: not read; did you mean "{name}"? (its block would be ignored)')


def check_document_keys(doc: dict[str, Any]) -> None:
    """The typos that would make a worker guard nothing and say nothing (issue 27): a bare
    ``tools.loopDetection`` block given as a whole file, ``tool``/``agent`` for ``tools``/
    ``agents``, ``loopDetecton`` under ``tools``, ``lists`` under ``agents``."""
    if "tools" not in doc and "agents" not in doc:
        fields = [key for key in doc if key in DEFAULTS or key == PER_TOOL]
        if fields:
            raise ConfigError(
                f"config: {', '.join(fields)} at the top level is a bare tools.loopDetection "
                "block; a config file nests it: {tools: {loopDetection: {...}}} (`loopguard "
                "config set --file` takes the bare block)"
            )
    if "loopDetection" in doc:
        raise ConfigError(
            'loopDetection: not read at the top level; did you mean "tools.loopDetection"?'
        )
    _near_miss(doc, "tools", "", ("loopDetection",))
    _near_miss(doc, "agents", "", ("list",))
    if isinstance(doc.get("tools"), dict):
        _near_miss(doc["tools"], "loopDetection", "tools", ())
    if isinstance(doc.get("agents"), dict):
        _near_miss(doc["agents"], "list", "agents", ())


def fleet_from_document(doc: Any) -> FleetConfig:
    """Read ``tools.loopDetection`` and ``agents.list[].tools.loopDetection`` from a document."""
    if doc is None:
        return FleetConfig()
    if not isinstance(doc, dict):
        raise ConfigError(f"config: expected an object at the top level, got {type(doc).__name__}")
    check_document_keys(doc)
    tools = _object_or_empty(doc.get("tools"), "tools")
    global_block = check_block(tools.get("loopDetection"), "tools.loopDetection")
    agents: dict[str, dict[str, Any]] = {}
    agent_list = _object_or_empty(doc.get("agents"), "agents").get("list")
    if agent_list is None:
        agent_list = []
    if not isinstance(agent_list, list):
        raise ConfigError(f"agents.list: expected a list, got {type(agent_list).__name__}")
    for index, entry in enumerate(agent_list):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise ConfigError(f"agents.list[{index}].id: expected a string agent id")
        agent_tools = _object_or_empty(entry.get("tools"), f"agents.list[{index}].tools")
        _near_miss(agent_tools, "loopDetection", f"agents.list[{index}].tools", ())
        block = agent_tools.get("loopDetection")
        if block is not None:
            path = f"agents.list[{index}].tools.loopDetection"
            agents[entry["id"]] = check_block(block, path)
            no_agent_incidents(block, path)
    fleet = FleetConfig(global_block, agents)
    for agent_id in agents:  # surface merge errors at load time, not on the first event
        fleet.for_agent(agent_id)
    log_fleet_warnings(fleet)  # and thresholds the window can never reach
    return fleet


def load_fleet_config(path: str | Path | None) -> FleetConfig:
    """The fleet config in a JSON5, JSON or YAML file; no file (``None`` or ``""``) means the
    built-in defaults. The one loader behind ``--config`` of the worker, replay and config."""
    if not path:
        return FleetConfig()
    return fleet_from_document(read_config_file(path))


# -------------------------------------------------------------- run-time overrides (records)

# Key of the override that replaces the global block; any other key is an agent id.
GLOBAL_KEY = "*"


def override_path(key: str) -> str:
    """Where an override keyed ``key`` sits in a fleet config (for error messages)."""
    if key == GLOBAL_KEY:
        return "tools.loopDetection"
    return f"agents.list[id={key}].tools.loopDetection"


def check_override(key: str, block: Any) -> dict[str, Any]:
    """Validate one override block as every reader of the config topic must: the workers
    ignore a record this refuses, ``loopguard config set`` never publishes one."""
    if not isinstance(block, dict):
        raise ConfigError(f"{override_path(key)}: expected an object, got {type(block).__name__}")
    check_limits(block, override_path(key))
    checked = check_block(block, override_path(key))
    if key != GLOBAL_KEY:  # refused here, not on every event of the agent (issue 40)
        no_agent_incidents(checked, override_path(key))
    return checked


def parse_override_record(key: str, value: bytes) -> dict[str, Any]:
    """An override record's value (JSON text of a block) → the checked block, refused past
    the size and nesting limits (streams.core.config_limits) before anything walks it."""
    return check_override(key, load_record(value, override_path(key)))


def override_record(block: dict[str, Any]) -> bytes:
    """A checked block as an override record's value (canonical JSON: sorted, compact)."""
    return json.dumps(block, sort_keys=True, separators=(",", ":")).encode()
