"""In-process loop guard over many runs: the detector core without Kafka.

The Faust worker keeps :class:`RunState` values in a table instead of this dict; replay,
benchmarks and tests use this class so they run the very same code path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from streams.core import history
from streams.core.config import LoopDetectionConfig
from streams.core.events import AgentEvent, Decision
from streams.core.fleet import FleetConfig
from streams.core.run_state import RunState
from streams.core.session import wants_predecessor


def core_build() -> str:
    """Which build of the detector core runs: "compiled (mypyc)" (setup.py) or "interpreted"."""
    return "interpreted" if history.__file__.endswith(".py") else "compiled (mypyc)"


def hand_over(
    state: RunState,
    event: AgentEvent,
    cfg: LoopDetectionConfig,
    latest_run: str | None,
    load_run: Callable[[str], RunState | None],
) -> None:
    """Before ``state`` applies an event that names a session: note the session, and in
    session scope hand a run that has processed nothing yet its session's latest run
    (``latest_run``, read with ``load_run``) to seed from (streams.core.session). Shared by
    LoopGuard and the worker, so both seed alike."""
    session_id = event.envelope.session_id or ""
    if state.session_id != session_id:
        state.session_id = session_id
    processed = state.stats.events
    if cfg.session_scope and wants_predecessor(state.run_id, session_id, latest_run, processed):
        previous = load_run(latest_run or "")
        state.predecessor = None if previous is None else previous.session_carry()


class LoopGuard:
    def __init__(self, fleet: FleetConfig | None = None) -> None:
        self.fleet = fleet or FleetConfig()
        self.runs: dict[str, RunState] = {}
        # session id -> its latest run that processed an event (session scope)
        self.sessions: dict[str, str] = {}
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
        if not env.session_id:
            return state.apply(event, cfg)
        hand_over(state, event, cfg, self.sessions.get(env.session_id), self.runs.get)
        processed = state.stats.events
        decisions = state.apply(event, cfg)
        if processed == 0 and state.stats.events:  # its first event: the session's latest run
            self.sessions[env.session_id] = env.run_id
        return decisions

    def process_all(self, events: Iterable[AgentEvent]) -> Iterator[Decision]:
        for event in events:
            yield from self.process(event)
