"""The one orchestration of the detector core: an event in, its run's decisions out.

:class:`LoopGuard` finds or starts an event's run state, hands a session's new run its
predecessor to seed from (session scope), applies the event and remembers the session's latest
run. Replay, backtest, benchmarks and tests host it over plain dicts; the worker's
:class:`streams.service.processor.EventProcessor` hosts the very same class over its tables,
so the same events give the same decisions in both (tests/unit/service/test_one_orchestration.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableMapping

from streams.core import history
from streams.core.config import LoopDetectionConfig
from streams.core.events import AgentEvent, Decision, Envelope
from streams.core.fleet import GLOBAL_KEY, FleetConfig
from streams.core.hold import mark_hold
from streams.core.operator_command import OperatorCommand
from streams.core.operator_release import apply_command
from streams.core.run_state import RunState
from streams.core.session import SessionCarry, wants_predecessor


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
    (``latest_run``, read with ``load_run``) to seed from (streams.core.session)."""
    session_id = event.envelope.session_id or ""
    if state.session_id != session_id:
        state.session_id = session_id
    processed = state.stats.events
    if cfg.session_scope and wants_predecessor(state.run_id, session_id, latest_run, processed):
        previous = load_run(latest_run or "")
        state.predecessor = None if previous is None else previous.session_carry()


ConfigFor = Callable[[str], LoopDetectionConfig]


class LoopGuard:
    """Runs the detector core over many runs. ``runs`` (run id -> state) and ``sessions``
    (session id -> its latest run that processed an event) are dicts unless a host hands in
    its own mappings (the worker: its tables as one batch sees them); ``configs`` resolves an
    agent's config (default: ``fleet``'s, cached per agent); ``carries``, when given, notes
    what each run was seeded from (the worker rebuilds a run whose event failed with it)."""

    def __init__(
        self,
        fleet: FleetConfig | None = None,
        *,
        configs: ConfigFor | None = None,
        runs: MutableMapping[str, RunState] | None = None,
        sessions: MutableMapping[str, str] | None = None,
        carries: MutableMapping[str, SessionCarry] | None = None,
    ) -> None:
        self.fleet = fleet or FleetConfig()
        self.configs = configs
        self.runs: MutableMapping[str, RunState] = {} if runs is None else runs
        self.sessions: MutableMapping[str, str] = {} if sessions is None else sessions
        self.carries = carries
        self._configs: dict[str, LoopDetectionConfig] = {}

    def config_for(self, agent_id: str) -> LoopDetectionConfig:
        if self.configs is not None:
            return self.configs(agent_id)
        # Agents without a block of their own share the global block's config: one entry
        # however many agent ids the events name (issue 40).
        key = agent_id if agent_id in self.fleet.agent_blocks else GLOBAL_KEY
        cfg = self._configs.get(key)
        if cfg is None:
            cfg = self._configs[key] = self.fleet.for_agent(key)
        return cfg

    def state_for(self, envelope: Envelope, cfg: LoopDetectionConfig) -> RunState:
        """The run's state, started (and kept in ``runs``) on its first event."""
        state = self.runs.get(envelope.run_id)
        if state is None:
            state = self.runs[envelope.run_id] = RunState(envelope.run_id, cfg.history_size)
        return state

    def apply(self, state: RunState, event: AgentEvent, cfg: LoopDetectionConfig) -> list[Decision]:
        """The core's verdict on one event of ``state``'s run. An event that names a session
        goes through session scope: the run's first event hands it its session's latest run
        to seed from, and makes it the session's latest run."""
        session_id = event.envelope.session_id
        if not session_id:
            return mark_hold(state.apply(event, cfg), cfg)
        processed = state.stats.events
        latest = None
        if processed == 0 and cfg.session_scope:  # only a run's first event reads it
            latest = self.sessions.get(session_id)
        hand_over(state, event, cfg, latest, self.runs.get)
        if state.predecessor is not None and self.carries is not None:
            self.carries[state.run_id] = state.predecessor
        decisions = state.apply(event, cfg)
        if processed == 0 and state.stats.events:  # its first event: the session's latest run
            self.sessions[session_id] = state.run_id
        return mark_hold(decisions, cfg)

    def process(self, event: AgentEvent | OperatorCommand) -> list[Decision]:
        if isinstance(event, OperatorCommand):
            return self.command(event)
        cfg = self.config_for(event.envelope.agent_id)
        return self.apply(self.state_for(event.envelope, cfg), event, cfg)

    def command(self, command: OperatorCommand) -> list[Decision]:
        """An operator's release or abort of a run this guard holds (none for another run:
        it ended and expired, or never was)."""
        state = self.runs.get(command.envelope.run_id)
        if state is None:
            return []
        cfg = self.config_for(state.agent_id or command.envelope.agent_id)
        return apply_command(state, command, cfg.enforced)

    def process_all(self, events: Iterable[AgentEvent | OperatorCommand]) -> Iterator[Decision]:
        for event in events:
            yield from self.process(event)
