"""One events-topic message in, its run's new state and decisions out; no Faust, no Kafka.

The Faust agent (:mod:`streams.worker.agents`) only moves bytes between topics and the table;
everything that decides what a message means is here, so it can be tested with plain values.

Keying: an event is keyed by its session id when it has one, else by its run id, so all runs
of a session share a partition and session scope (:mod:`streams.core.session`) can read the
previous run's state from this worker's own table; an event under any other key is re-sent
under the right one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from streams.core.config import LoopDetectionConfig
from streams.core.engine import hand_over
from streams.core.events import AgentEvent, Decision, Envelope, partition_key
from streams.core.run_state import RunState
from streams.core.session import SessionCarry
from streams.wire.avro import RunWatermark


@dataclass
class Outcome:
    """What the agent must do for one decoded event: publish, dead-letter or re-key it."""

    decisions: list[Decision] = field(default_factory=list)
    dead_letter: str | None = None  # the reason, when the message is parked
    rekey: bytes | None = None  # the key (session or run id) the message must be re-sent under
    event: AgentEvent | None = None  # the decoded event, when it was applied
    loop_tokens: int = 0  # tokens the event added to its run's loop (issue 28, /metrics)
    saved_tokens: int = 0  # the saved-tokens estimate it took, when it stopped its run


@dataclass(frozen=True)
class TouchedRun:
    """A run changed in this batch: its state to store and the watermark to publish."""

    key: bytes
    state: RunState
    watermark: RunWatermark


class EventProcessor:
    """Applies decoded events to per-run state, keeping the states it touched for one batch.

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
        self.load_state = load_state
        self.config_for = config_for
        self.republish_duplicates = republish_duplicates
        self.load_latest_run = load_latest_run or (lambda key: None)
        self.sessions: dict[bytes, bytes] = {}  # session -> latest run, changed this batch
        self.carries: dict[bytes, SessionCarry] = {}  # what a run was seeded from, this batch
        self.touched: dict[bytes, RunState] = {}
        self.envelopes: dict[bytes, Envelope] = {}  # the newest of each touched run
        self.applied: dict[bytes, list[AgentEvent]] = {}  # this batch's events per run
        self.before_batch: dict[bytes, dict[str, Any] | None] = {}  # run state at batch start

    def take_touched(self) -> list[TouchedRun]:
        """The runs changed since the last call, to be stored and announced once per batch."""
        touched = [
            TouchedRun(key, state, self.watermark(state, self.envelopes[key]))
            for key, state in self.touched.items()
        ]
        self.touched, self.envelopes, self.applied, self.before_batch = {}, {}, {}, {}
        self.carries = {}
        return touched

    def take_sessions(self) -> dict[bytes, bytes]:
        """Sessions whose latest run changed since the last call (session id -> run id)."""
        sessions, self.sessions = self.sessions, {}
        return sessions

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
        run_key = envelope.run_id.encode()
        route = partition_key(envelope).encode()
        if key != route:
            # Keyed by something else: re-key so the run's state (and its session's runs)
            # live on one partition.
            return Outcome(rekey=route)
        cfg = self.config_for(envelope.agent_id)
        state = self.touched.get(run_key)
        if state is None:
            state = self.load_state(run_key)
            # As the run was before this batch: what a failed evaluation goes back to.
            self.before_batch[run_key] = None if state is None else state.snapshot()
            if state is None:
                state = RunState(envelope.run_id, cfg.history_size)
        self.touched[run_key] = state
        self.envelopes[run_key] = envelope
        if state.is_duplicate(envelope.seq):
            # Redelivered (e.g. after a crash): publish again what this event decided, with
            # the same decision ids, in case the first publication died in the producer buffer.
            decided = state.decisions_for(envelope.seq)
            return Outcome(decisions=decided if self.republish_duplicates else [], event=event)
        loop_before, saved_before = state.usage.loop_tokens, state.usage.saved_tokens
        try:
            decisions = self.evaluate(run_key, route, state, event, cfg)
        except Exception as exc:  # noqa: BLE001 - one event must never stop a partition
            self.rebuild(run_key, envelope.run_id, cfg)
            return Outcome(dead_letter=f"evaluation failed: {type(exc).__name__}: {exc}")
        self.applied.setdefault(run_key, []).append(event)
        return Outcome(
            decisions=decisions,
            event=event,
            loop_tokens=state.usage.loop_tokens - loop_before,
            saved_tokens=state.usage.saved_tokens - saved_before,
        )

    def evaluate(
        self,
        run_key: bytes,
        route: bytes,
        state: RunState,
        event: AgentEvent,
        cfg: LoopDetectionConfig,
    ) -> list[Decision]:
        """The core's verdict on one event; an event with a session goes through session
        scope exactly as :class:`streams.core.engine.LoopGuard` does."""
        if route == run_key:
            return state.apply(event, cfg)
        latest = None
        if not state.stats.events and cfg.session_scope:  # only a run's first event reads it
            latest = self.sessions.get(route) or self.load_latest_run(route)
        hand_over(state, event, cfg, None if latest is None else latest.decode(), self.run_state)
        if state.predecessor is not None:
            self.carries[run_key] = state.predecessor  # for rebuild, should the event fail
        processed = state.stats.events
        decisions = state.apply(event, cfg)
        if processed == 0 and state.stats.events:  # its first event: the session's latest run
            self.sessions[route] = run_key
        return decisions

    def run_state(self, run_id: str) -> RunState | None:
        key = run_id.encode()
        return self.touched.get(key) or self.load_state(key)

    def rebuild(self, run_key: bytes, run_id: str, cfg: LoopDetectionConfig) -> None:
        """Put a run back as it was before the event that failed: its state at the start of
        the batch plus the batch's earlier events (they applied cleanly and do so again)."""
        snapshot = self.before_batch.get(run_key)
        state = (
            RunState(run_id, cfg.history_size) if snapshot is None else RunState.from_dict(snapshot)
        )
        carry = self.carries.get(run_key)
        if carry is not None and not state.stats.events:
            state.predecessor = carry  # seeded in this batch: seed the rebuilt state alike
        for earlier in self.applied.get(run_key, []):
            state.apply(earlier, cfg)
        self.touched[run_key] = state
