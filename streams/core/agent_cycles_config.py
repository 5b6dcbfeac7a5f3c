"""The ``agentCycles`` block of ``tools.loopDetection`` (issue 28): loops between agents.

``{enabled, warnAfter, blockAfter, windowSeconds}``: a cycle of agents whose sends carried the
same messages round ``warnAfter`` times in a row warns the runs of the cycle, ``blockAfter``
times blocks their next send; sends older than ``windowSeconds`` (event time) are forgotten.
Kept apart from config.py like deviations.py, and counted in ``config_version`` only when off
its defaults, so every config written before it keeps its version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.config_block import check_block

AGENT_CYCLES = "agentCycles"
CYCLE_DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "warnAfter": 3,
    "blockAfter": 5,
    "windowSeconds": 3600,
}
CYCLE_INT_FIELDS = ("warnAfter", "blockAfter", "windowSeconds")


@dataclass(frozen=True, slots=True)
class AgentCyclesConfig:
    """Resolved ``agentCycles``: block_after is raised above warn_after, as the thresholds."""

    enabled: bool = True
    warn_after: int = 3
    block_after: int = 5
    window_seconds: int = 3600


def check_agent_cycles(value: Any, where: str) -> None:
    """Refuse an ``agentCycles`` block with unknown fields or values of the wrong type."""
    check_block(value, where, CYCLE_DEFAULTS, switches=("enabled",))


def resolve_agent_cycles(merged: dict[str, Any]) -> AgentCyclesConfig:
    """``merged``: the block over the defaults (config.merge_blocks merges it per field)."""
    warn = merged["warnAfter"]
    return AgentCyclesConfig(
        enabled=merged["enabled"],
        warn_after=warn,
        block_after=max(merged["blockAfter"], warn + 1),
        window_seconds=merged["windowSeconds"],
    )


def canonical_agent_cycles(resolved: AgentCyclesConfig) -> dict[str, Any]:
    """The fields off their defaults, as they count for ``config_version`` ({} by default)."""
    values = {
        "enabled": resolved.enabled,
        "warnAfter": resolved.warn_after,
        "blockAfter": resolved.block_after,
        "windowSeconds": resolved.window_seconds,
    }
    return {name: value for name, value in values.items() if value != CYCLE_DEFAULTS[name]}
