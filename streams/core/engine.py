"""In-process loop guard over many runs: the detector core without Kafka.

The Faust worker keeps :class:`RunState` values in a table instead of this dict; replay,
benchmarks and tests use this class so they run the very same code path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from streams.core import history
from streams.core.config import FleetConfig, LoopDetectionConfig
from streams.core.events import AgentEvent, Decision
from streams.core.run_state import RunState


def core_build() -> str:
    """Which build of the detector core runs: "compiled (mypyc)" (setup.py) or "interpreted"."""
    return "interpreted" if history.__file__.endswith(".py") else "compiled (mypyc)"


class LoopGuard:
    def __init__(self, fleet: FleetConfig | None = None) -> None:
        self.fleet = fleet or FleetConfig()
        self.runs: dict[str, RunState] = {}
        self._configs: dict[str, LoopDetectionConfig] = {}

    def config_for(self, agent_id: str) -> LoopDetectionConfig:
        cfg = self._configs.get(agent_id)
        if cfg is None:
            cfg = self._configs[agent_id] = self.fleet.for_agent(agent_id)
        return cfg

    def process(self, event: AgentEvent) -> list[Decision]:
        env = event.envelope
        cfg = self._configs.get(env.agent_id) or self.config_for(env.agent_id)
        state = self.runs.get(env.run_id)
        if state is None:
            state = self.runs[env.run_id] = RunState(env.run_id, cfg.history_size)
        return state.apply(event, cfg)

    def process_all(self, events: Iterable[AgentEvent]) -> Iterator[Decision]:
        for event in events:
            yield from self.process(event)
