"""One events-topic message in, its run's new state and decisions out; no Faust, no Kafka.

The Faust agent (:mod:`streams.worker.agents`) only moves bytes between topics and the table;
everything that decides what a message means is here, so it can be tested with plain values.

Keying: an event is keyed by its session id when it has one, else by its run id, so all runs
of a session share a partition and session scope (:mod:`streams.core.session`) can read the
previous run's state from this worker's own table; an event under any other key is re-sent
under the right one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from streams.core.config import LoopDetectionConfig
from streams.core.engine import LoopGuard
from streams.core.events import AgentEvent, Decision, Envelope, partition_key
from streams.core.operator_command import OperatorCommand
from streams.core.operator_release import apply_command
from streams.core.run_state import RunState
from streams.core.session import SessionCarry
from streams.state import state_format
from streams.wire.avro import RunWatermark
from streams.wire.signing import FOREIGN_RUN


@dataclass
class Outcome:
    """What the agent must do for one decoded event: publish, dead-letter or re-key it."""

    decisions: list[Decision] = field(default_factory=list)
    dead_letter: str | None = None  # the reason, when the message is parked
    dead_letter_kind: str = "invalid_event"  # its metric kind
    rekey: bytes | None = None  # the key (session or run id) the message must be re-sent under
    event: AgentEvent | None = None  # the decoded event, when it was applied
    loop_tokens: int = 0  # tokens the event added to its run's loop (issue 28, /metrics)
    saved_tokens: int = 0  # the saved-tokens estimate it took, when it stopped its run


class RunGuard(Protocol):
    """What the processor asks of the core (:class:`streams.core.engine.LoopGuard`): a run's
    state, the verdict on an event, an operator's command. A seam, so a test can make the core
    fail where the processor is compiled (setup.py) and a patch of the class would not reach."""

    def config_for(self, agent_id: str) -> LoopDetectionConfig: ...

    def state_for(self, envelope: Envelope, cfg: LoopDetectionConfig) -> RunState: ...

    def apply(
        self, state: RunState, event: AgentEvent, cfg: LoopDetectionConfig
    ) -> list[Decision]: ...

    def command(self, command: OperatorCommand) -> list[Decision]: ...


@dataclass(frozen=True)
class TouchedRun:
    """A run changed in this batch: its state to store and the watermark to publish."""

    key: bytes
    state: RunState
    watermark: RunWatermark


class BatchRuns(MutableMapping[str, RunState]):
    """The runs table as one batch sees it: the states the batch touched, else the stored
    ones (read, never copied); what is set here is the batch's to store."""

    def __init__(self, load: Callable[[bytes], RunState | None]) -> None:
        self.load = load
        self.touched: dict[str, RunState] = {}

    def get(self, run_id: str, default: Any = None) -> Any:  # type: ignore[override]
        state = self.touched.get(run_id)
        if state is None:
            state = self.load(run_id.encode())
        return default if state is None else state

    def __getitem__(self, run_id: str) -> RunState:
        state = self.get(run_id)
        if state is None:
            raise KeyError(run_id)
        return state

    def __setitem__(self, run_id: str, state: RunState) -> None:
        self.touched[run_id] = state

    def __delitem__(self, run_id: str) -> None:
        del self.touched[run_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.touched)

    def __len__(self) -> int:
        return len(self.touched)


class BatchSessions(MutableMapping[str, str]):
    """The sessions table (session id -> its latest run id) as one batch sees it: the batch's
    changes, else the stored value."""

    def __init__(self, load: Callable[[bytes], bytes | None]) -> None:
        self.load = load
        self.changed: dict[str, str] = {}

    def get(self, session_id: str, default: Any = None) -> Any:  # type: ignore[override]
        run_id = self.changed.get(session_id)
        if run_id is None:
            stored = self.load(session_id.encode())
            run_id = None if stored is None else stored.decode()
        return default if run_id is None else run_id

    def __getitem__(self, session_id: str) -> str:
        run_id = self.get(session_id)
        if run_id is None:
            raise KeyError(session_id)
        return run_id

    def __setitem__(self, session_id: str, run_id: str) -> None:
        self.changed[session_id] = run_id

    def __delitem__(self, session_id: str) -> None:
        del self.changed[session_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.changed)

    def __len__(self) -> int:
        return len(self.changed)


def rollback_point(state: RunState) -> bytes:
    """A stored run's state as a failed event of this batch goes back to: the bytes it was
    last written as or read from (the worker keeps them), else its encoding now (states no
    encoder wrote: tests', replay's)."""
    return state.written if state.written is not None else state_format.encode(state)


class EventProcessor:
    """Applies decoded events to per-run state through the core's one orchestration
    (:class:`streams.core.engine.LoopGuard`, hosted over the tables as one batch sees them),
    keeping the states it touched for one batch.

    ``load_state`` reads a run's stored state (the Faust table, a dict in tests);
    ``config_for`` resolves an agent's config; ``load_latest_run`` reads a session's latest
    run id (the sessions table), for session scope. ``republish_duplicates``: at least once,
    a redelivered event publishes its decisions again (the first publication may have died
    in the producer buffer); exactly once they were committed with the state that says the
    event is done, so it publishes none.
    """

    def __init__(
        self,
        load_state: Callable[[bytes], RunState | None],
        config_for: Callable[[str], LoopDetectionConfig],
        load_latest_run: Callable[[bytes], bytes | None] | None = None,
        *,
        republish_duplicates: bool = True,
    ) -> None:
        self.config_for = config_for
        self.republish_duplicates = republish_duplicates
        self.runs = BatchRuns(load_state)
        self.sessions = BatchSessions(load_latest_run or (lambda key: None))
        self.carries: dict[str, SessionCarry] = {}  # what a run was seeded from, this batch
        self.guard: RunGuard = LoopGuard(
            configs=config_for, runs=self.runs, sessions=self.sessions, carries=self.carries
        )
        self.envelopes: dict[str, Envelope] = {}  # the newest of each touched run
        # this batch's events (and operator commands) per run
        self.applied: dict[str, list[AgentEvent | OperatorCommand]] = {}
        self.before_batch: dict[str, bytes | None] = {}  # run state at batch start

    def take_touched(self) -> list[TouchedRun]:
        """The runs changed since the last call, to be stored and announced once per batch."""
        touched = [
            TouchedRun(run_id.encode(), state, self.watermark(state, self.envelopes[run_id]))
            for run_id, state in self.runs.touched.items()
        ]
        self.runs.touched, self.envelopes, self.applied, self.before_batch = {}, {}, {}, {}
        self.carries.clear()
        return touched

    def take_sessions(self) -> dict[bytes, bytes]:
        """Sessions whose latest run changed since the last call (session id -> run id)."""
        sessions, self.sessions.changed = self.sessions.changed, {}
        return {session.encode(): run.encode() for session, run in sessions.items()}

    @staticmethod
    def watermark(state: RunState, envelope: Envelope) -> RunWatermark:
        progress = RunWatermark(
            run_id=state.run_id,
            agent_id=envelope.agent_id,
            gateway_id=envelope.gateway_id,
            seq=state.last_seq,
            event_time=state.last_seq_time,
            status=state.status,
            event_count=state.event_count,
        )
        usage = state.usage
        if not usage.reported:  # the version older gateways read
            return progress
        return replace(
            progress,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost_usd=usage.cost_usd,
            tool_calls=usage.calls,
            loop_tokens=usage.loop_tokens,
            loop_cost_usd=usage.loop_cost_usd,
            loop_calls=usage.loop_calls,
            saved_tokens=usage.saved_tokens,
        )

    def apply(self, key: bytes | None, event: AgentEvent) -> Outcome:
        envelope = event.envelope
        if envelope.seq < 1:
            return Outcome(
                dead_letter=f"seq must be 1 or more (run sequences start at 1), got {envelope.seq}"
            )
        run_id = envelope.run_id
        if key != partition_key(envelope).encode():
            # Keyed by something else: re-key so the run's state (and its session's runs)
            # live on one partition.
            return Outcome(rekey=partition_key(envelope).encode())
        stored = self.runs.get(run_id)  # one read: the batch's state, else the table's
        owner = "" if stored is None else stored.gateway_id
        if owner and envelope.gateway_id != owner:
            # issue 40: a run belongs to the gateway that started it; another gateway's event
            # for it (an injected call, an injected RunEnded) is refused, never applied.
            return Outcome(
                dead_letter=f"run {run_id} belongs to gateway {owner!r}; an event from "
                f"gateway {envelope.gateway_id!r} is refused",
                dead_letter_kind=FOREIGN_RUN,
            )
        cfg = self.config_for(envelope.agent_id)
        if run_id not in self.runs.touched:
            # As the run was before this batch: what a failed evaluation goes back to.
            self.before_batch[run_id] = None if stored is None else rollback_point(stored)
            if stored is not None:
                self.runs.touched[run_id] = stored  # the core's read below finds it here
        state = self.runs.touched[run_id] = self.guard.state_for(envelope, cfg)
        self.envelopes[run_id] = envelope
        if state.is_duplicate(envelope.seq):
            # Redelivered (e.g. after a crash): publish again what this event decided, with
            # the same decision ids, in case the first publication died in the producer buffer.
            decided = state.decisions_for(envelope.seq)
            return Outcome(decisions=decided if self.republish_duplicates else [], event=event)
        loop_before, saved_before = state.usage.loop_tokens, state.usage.saved_tokens
        try:
            decisions = self.guard.apply(state, event, cfg)
        except Exception as exc:  # noqa: BLE001 - one event must never stop a partition
            self.rebuild(run_id, cfg)
            return Outcome(dead_letter=f"evaluation failed: {type(exc).__name__}: {exc}")
        self.applied.setdefault(run_id, []).append(event)
        return Outcome(
            decisions=decisions,
            event=event,
            loop_tokens=state.usage.loop_tokens - loop_before,
            saved_tokens=state.usage.saved_tokens - saved_before,
        )

    def owner_of(self, run_id: str) -> str:
        """The gateway a run belongs to: the one its first event named ("" for a run not
        started yet, or started without a gateway id)."""
        state = self.runs.get(run_id)
        return "" if state is None else state.gateway_id

    def rebuild(self, run_id: str, cfg: LoopDetectionConfig) -> None:
        """Put a run back as it was before the event that failed: its state at the start of
        the batch plus the batch's earlier events (they applied cleanly and do so again)."""
        written = self.before_batch.get(run_id)
        state = (
            RunState(run_id, cfg.history_size) if written is None else state_format.decode(written)
        )
        carry = self.carries.get(run_id)
        if carry is not None and not state.stats.events:
            state.predecessor = carry  # seeded in this batch: seed the rebuilt state alike
        for earlier in self.applied.get(run_id, []):
            if isinstance(earlier, OperatorCommand):
                apply_command(state, earlier, cfg.enforced)
            else:
                state.apply(earlier, cfg)
        self.runs.touched[run_id] = state

    def apply_command(self, key: bytes | None, command: OperatorCommand) -> Outcome:
        """An operator's release or abort (issue 43): applied to the run's state where the
        run's events stand now, like an event of the run but outside its seq order."""
        envelope = command.envelope
        run_id = envelope.run_id
        if key != partition_key(envelope).encode():
            return Outcome(rekey=partition_key(envelope).encode())
        stored = self.runs.get(run_id)
        if stored is None:
            return Outcome(
                dead_letter=f"{command.command} of run {run_id}: no such run on this worker "
                "(it ended and expired, or never started)"
            )
        if run_id not in self.runs.touched:
            self.before_batch[run_id] = rollback_point(stored)
        self.runs.touched[run_id] = stored
        if run_id not in self.envelopes:
            self.envelopes[run_id] = replace(
                envelope, agent_id=stored.agent_id, gateway_id=stored.gateway_id
            )
        try:
            decisions = self.guard.command(command)
        except Exception as exc:  # noqa: BLE001 - issue 40: one command must never stop a partition
            self.rebuild(run_id, self.guard.config_for(stored.agent_id or envelope.agent_id))
            return Outcome(dead_letter=f"command failed: {type(exc).__name__}: {exc}")
        self.applied.setdefault(run_id, []).append(command)
        return Outcome(decisions=decisions)
