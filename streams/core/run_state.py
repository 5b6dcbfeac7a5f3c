"""Per-run state machine: orders a run's events, feeds the detectors and the post-compaction
guard, and turns what they find into decisions for the gateway.

Pure and deterministic: the same events in give the same decisions out and the same
serialised state, byte for byte; delivered in another order (within the reorder limits) or
with duplicates, they still give the same decisions (only the delivery counters differ).
A lost event holds the run's later events for a bounded wait, in event count and in event
time (the events' own ``event_time``, never the worker's clock, so replay decides the same),
after which the run moves on without it; a RunEnded processes whatever waits.
This is the one object the Faust agents keep in their table, the replay tool re-runs and the
tests drive directly. Its fields are in run_data.py; judging a call, recording a result, the
session hand-over and persistence each have their own module.
"""

from __future__ import annotations

from typing import Any

from streams.core.config import LoopDetectionConfig
from streams.core.decisions import compaction_storm_decision, run_aborted_decision
from streams.core.events import (
    Action,
    AgentEvent,
    CompactionRetry,
    Decision,
    RunEnded,
    ToolCall,
    ToolResult,
)
from streams.core.loop_spend import LOOP_BUDGET
from streams.core.loop_watch import watch_loop, watches_loops, worded
from streams.core.recent_decisions import keep_recent, recent_decision_dict
from streams.core.reorder import gap_expired
from streams.core.run_calls import on_call, settle_held
from streams.core.run_data import ABORTED, ACTIVE, ENDED, RunData
from streams.core.run_handover import session_carry, take_over
from streams.core.run_persistence import restore_run, run_as_dict
from streams.core.run_results import on_result
from streams.core.session import SessionCarry
from streams.core.usage import clean_cost, clean_tokens

__all__ = ["ABORTED", "ACTIVE", "ENDED", "RunState"]


class RunState(RunData):
    """A run's fields (run_data.py) with the state machine that moves them."""

    # -- ordering --------------------------------------------------------------------

    def apply(self, event: AgentEvent, cfg: LoopDetectionConfig) -> list[Decision]:
        """Take one delivered event; process it and anything it unblocks, in seq order."""
        seq = event.envelope.seq
        if seq == self.last_seq + 1 and not self.waiting:
            # The common case, in order with nothing waiting: what the loop below would do.
            self.last_seq = seq
            decided = self._process(event, cfg)
            if not decided:
                return decided
            keep_recent(self.recent, seq, decided)
            return list(decided)
        if seq <= self.last_seq or seq in self.waiting:
            self.stats.duplicates += 1
            return []
        self.waiting[seq] = event
        if isinstance(event, RunEnded):  # nothing comes after the end: stop waiting
            return self.flush(cfg)
        decisions: list[Decision] = []
        while self.waiting:
            following = self.last_seq + 1
            if following not in self.waiting:
                if not gap_expired(self.waiting):
                    break
                following = min(self.waiting)
                self.stats.gaps += following - self.last_seq - 1
            ready = self.waiting.pop(following)
            self.last_seq = following
            decisions.extend(self._remember(following, self._process(ready, cfg)))
        return decisions

    def _remember(self, seq: int, decisions: list[Decision]) -> list[Decision]:
        if decisions:
            keep_recent(self.recent, seq, decisions)
        return decisions

    def flush(self, cfg: LoopDetectionConfig) -> list[Decision]:
        """Give up on every gap (run ended or idle): process what waits, in seq order."""
        decisions: list[Decision] = []
        for seq in sorted(self.waiting):
            event = self.waiting.pop(seq)
            self.stats.gaps += seq - self.last_seq - 1
            self.last_seq = seq
            decisions.extend(self._remember(seq, self._process(event, cfg)))
        return decisions

    # -- processing ------------------------------------------------------------------

    def _process(self, event: AgentEvent, cfg: LoopDetectionConfig) -> list[Decision]:
        window = self.release
        if window is not None and not window.covers(event.envelope.event_time):
            window = self.release = None  # the release is over: the guard resumes
        status, blocks = self.status, self.blocks
        decisions = self._evaluate(event, cfg)
        watching = watches_loops(cfg)
        if watching:  # the current loop's spend, and the budget rule (issue 43, loop_watch.py)
            decisions = watch_loop(
                self.run_id, self.loop, event, decisions, cfg, self.status == ACTIVE
            )
            if decisions and decisions[-1].detector == LOOP_BUDGET:
                self.status = ABORTED
        if window is not None:  # released by an operator: warnings only (issue 43)
            decisions = window.soften(decisions)
            if self.status == ABORTED and status != ABORTED:
                self.status = status
            self.blocks = blocks
            if isinstance(event, ToolCall):
                window.took_call()
        if watching:  # worded for the model, as the gateway will act on them
            decisions = worded(decisions, self.loop, cfg)
        usage = self.usage
        event_time = event.envelope.event_time
        if not usage.started_at:
            usage.started_at = event_time
        if isinstance(event, ToolCall | RunEnded):  # the events that carry a model turn
            usage.add(
                event_time,
                isinstance(event, ToolCall),
                clean_tokens(event.input_tokens),
                clean_tokens(event.output_tokens),
                clean_cost(event.cost_usd),
            )
        stopped = False
        for decision in decisions:
            enforced = decision.enforced
            usage.decided(decision.seq, enforced and decision.action is Action.BLOCK)
            stopped = stopped or (enforced and decision.action is Action.ABORT)
        if stopped or (usage.blocked and isinstance(event, RunEnded)):
            # loopguard stopped the loop: what did that save? (within the agent's budget)
            usage.stop(event_time, cfg.run_budget.calls, cfg.run_budget.tokens)
        return decisions

    def _evaluate(self, event: AgentEvent, cfg: LoopDetectionConfig) -> list[Decision]:
        env = event.envelope
        if self.predecessor is not None:
            take_over(self, self.predecessor, event, cfg)
        self.stats.events += 1
        if env.agent_id:
            self.agent_id = env.agent_id
        if env.gateway_id:
            self.gateway_id = env.gateway_id
        if env.event_time > self.last_event_time:
            self.last_event_time = env.event_time
        self.last_seq_time = env.event_time
        if self.history.max_size != cfg.history_size:
            self.history.resize(cfg.history_size)
        if self.status != ACTIVE:
            self.stats.late += 1
            if self.status == ABORTED and isinstance(event, ToolCall):
                return [run_aborted_decision(self.run_id, event, cfg, self.blocks)]
            return []
        if self.held is not None:  # a blocked call waits for this event (held_call.py)
            settle_held(self, self.held, event, cfg)
        if isinstance(event, ToolCall):
            return on_call(self, event, cfg)
        if isinstance(event, ToolResult):
            return on_result(self, event, cfg)
        if isinstance(event, CompactionRetry):
            # Every compaction retry arms the guard, whatever its trigger (overflow, timeout,
            # continuation), as in the reference runtime.
            if cfg.compaction_guard_on:
                self.guard.arm(
                    cfg.compaction_window_size, self.run_id, cfg.deviations.carry_guard_counts
                )
                storm = self.guard.compaction()
                if storm >= cfg.compaction_storm_threshold and cfg.detectors.compaction_storm:
                    return [self._storm(event, cfg, storm)]
            return []
        if isinstance(event, RunEnded):
            self.status = ENDED
        return []

    def _storm(self, event: CompactionRetry, cfg: LoopDetectionConfig, storm: int) -> Decision:
        self.status = ABORTED
        records = self.history.records
        tool_name = records[-1].tool_name if records else ""
        return compaction_storm_decision(self.run_id, event, cfg, storm, tool_name)

    # -- session scope (run_handover.py) ---------------------------------------------

    def session_carry(self) -> SessionCarry:
        """A copy of what this run's successor in its session carries over."""
        return session_carry(self)

    # -- persistence (Faust table values, run_persistence.py) --------------------------

    def to_dict(self) -> dict[str, Any]:
        return run_as_dict(
            self, [[seq, [recent_decision_dict(d) for d in ds]] for seq, ds in self.recent]
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        state = cls(
            run_id=data["run_id"],
            history_size=data["history_size"],
            agent_id=data["agent_id"],
            gateway_id=data["gateway_id"],
            last_seq=data["last_seq"],
            status=data["status"],
            blocks=data["blocks"],
            error_streak=data.get("error_streak", 0),  # states written before issue 17: 0
            last_event_time=data["last_event_time"],
            # States written before it was kept: the newest event time is the best guess.
            last_seq_time=data.get("last_seq_time", data["last_event_time"]),
            session_id=data.get("session_id", ""),
        )
        restore_run(state, data)
        return state
