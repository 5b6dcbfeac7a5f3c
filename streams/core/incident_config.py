"""``incidents``: the fleet's loop-incident settings, inside the global ``tools.loopDetection``
block (issue 28).

An incident is fleet-wide (many runs of many agents sharing one signature), so only the
global block's ``incidents`` counts; an agent's own block may not set it (fleet.py refuses it,
naming the global path). Off by default: the block enters ``config_version`` only when it
differs from the defaults, so every config written before incidents existed keeps its version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.config_block import checked_fields
from streams.core.config_error import ConfigError

INCIDENTS = "incidents"
INCIDENT_DEFAULTS: dict[str, Any] = {
    "enabled": False,
    "windowSeconds": 300,
    "minRuns": 5,
    "minAgents": 2,
}
MAX_WINDOW_SECONDS = 86_400


@dataclass(frozen=True, slots=True)
class IncidentConfig:
    """Resolved ``incidents`` block: a signature shared by ``min_runs`` distinct runs and
    ``min_agents`` distinct agents within one tumbling window of ``window_seconds`` opens an
    incident."""

    enabled: bool = False
    window_seconds: int = 300
    min_runs: int = 5
    min_agents: int = 2

    @property
    def window_ms(self) -> int:
        return self.window_seconds * 1000


def check_incidents(value: Any, where: str) -> None:
    """Validate a raw ``incidents`` object; :class:`ConfigError` names the bad field."""
    for at, name, setting in checked_fields(value, where, INCIDENT_DEFAULTS, ("enabled",)):
        if name == "windowSeconds" and setting > MAX_WINDOW_SECONDS:
            raise ConfigError(f"{at}: must be at most {MAX_WINDOW_SECONDS} (a day), got {setting}")


def resolve_incidents(merged: dict[str, Any]) -> IncidentConfig:
    """The resolved settings of an ``incidents`` block merged over the defaults."""
    return IncidentConfig(
        enabled=merged["enabled"],
        window_seconds=merged["windowSeconds"],
        min_runs=merged["minRuns"],
        min_agents=merged["minAgents"],
    )


def canonical_incidents(merged: dict[str, Any]) -> dict[str, Any] | None:
    """The block as it counts for ``config_version``: ``None`` (left out) at the defaults."""
    if merged == INCIDENT_DEFAULTS:
        return None
    return dict(merged)
