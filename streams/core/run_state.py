"""Per-run state machine: orders a run's events, feeds the detectors and the post-compaction
guard, and turns what they find into decisions for the gateway.

Pure and deterministic: the same events in give the same decisions out and the same
serialised state, byte for byte; delivered in another order (within the reorder limits) or
with duplicates, they still give the same decisions (only the delivery counters differ).
A lost event holds the run's later events for a bounded wait, in event count and in event
time (the events' own ``event_time``, never the worker's clock, so replay decides the same),
after which the run moves on without it; a RunEnded processes whatever waits.
This is the one object the Faust agents keep in their table, the replay tool re-runs and the
tests drive directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streams.core.bursts import TurnCalls
from streams.core.call_identity import ignored_args
from streams.core.call_record import CallRecord
from streams.core.canonical import parse_json
from streams.core.config import LoopDetectionConfig
from streams.core.decisions import (
    compaction_loop_decision,
    compaction_storm_decision,
    detection_decision,
    run_aborted_decision,
)
from streams.core.detectors import CRITICAL, CurrentCall, Detection
from streams.core.events import (
    Action,
    AgentEvent,
    CompactionRetry,
    Decision,
    RunEnded,
    ToolCall,
    ToolResult,
    event_from_dict,
    event_to_dict,
)
from streams.core.failures import detect_with_failures, unmatched_error_streak
from streams.core.guard import PostCompactionGuard
from streams.core.hashing import (
    MEMO_MAX_CHARS,
    call_info,
    result_outcome,
    stripped_result_outcome,
)
from streams.core.held_call import HeldCall
from streams.core.history import RunHistory
from streams.core.outcome_memory import CHANGING_TOOLS, OutcomeMemory
from streams.core.outcomes import Outcome
from streams.core.progress import detect_progress
from streams.core.recent_decisions import keep_recent, recent_decision_dict
from streams.core.release_window import ReleaseWindow
from streams.core.reorder import gap_expired
from streams.core.session import SessionCarry, keep_loop_streaks, resumes_late, starts_fresh
from streams.core.session_failures import FailingCalls, detect_across_runs, remembers_failures
from streams.core.usage import RunUsage, clean_cost, clean_tokens

ACTIVE, ENDED, ABORTED = "active", "ended", "aborted"


@dataclass(slots=True)
class RunStats:
    events: int = 0
    duplicates: int = 0
    gaps: int = 0
    late: int = 0  # events for a run that already ended or was aborted


@dataclass
class RunState:
    run_id: str
    history_size: int = 30
    agent_id: str = ""
    gateway_id: str = ""
    last_seq: int = 0  # highest seq processed; every seq before it processed or given up
    status: str = ACTIVE
    blocks: int = 0
    error_streak: int = 0  # failed tool outcomes in a row (failures.next_error_streak)
    last_event_time: int = 0  # newest event_time seen (run expiry)
    last_seq_time: int = 0  # event_time of the event at last_seq (run progress)
    waiting: dict[int, AgentEvent] = field(default_factory=dict)
    history: RunHistory = field(init=False)
    guard: PostCompactionGuard = field(default_factory=PostCompactionGuard)
    stats: RunStats = field(default_factory=RunStats)
    # Oldest first, at most recent_decisions.RECENT_DECISIONS (a list: an empty deque holds a
    # 64-slot block, 760 bytes, in every run that never decided anything).
    recent: list[tuple[int, list[Decision]]] = field(default_factory=list)
    session_id: str = ""  # the session the run belongs to, once an event named it
    # Tokens and cost its events reported, and while it was looping (issue 28).
    usage: RunUsage = field(default_factory=RunUsage)
    # A blocked call waiting for the run's next event to say whether it was vetoed, under
    # ``deviations.vetoIsOutcome: false`` (held_call.py).
    held: HeldCall | None = None
    # Each call's identical-outcome streak over the whole run (issue 38, progress.py).
    outcomes: OutcomeMemory = field(default_factory=OutcomeMemory)
    # The current assistant turn's calls, judged as a set (issue 44, bursts.py).
    turn: TurnCalls = field(default_factory=TurnCalls)
    # Session scope: the session's calls failing the same way run after run (issue 44,
    # session_failures.py), carried into every next run of the session.
    failing: FailingCalls = field(default_factory=FailingCalls)
    own_from: int = 0  # session scope: the index of its own first call (after a carried window)
    # An operator's release: warnings only while it lasts (issue 43, release_window.py).
    release: ReleaseWindow | None = None
    # The ids of the last operator commands applied, so a redelivered one applies once.
    commands: list[str] = field(default_factory=list)
    # Session scope: the previous run of the session, to seed from on the first event
    # processed (streams.core.session); handed in by the engine, never stored.
    predecessor: SessionCarry | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.history = RunHistory(self.history_size)

    @property
    def event_count(self) -> int:
        """Events applied so far (duplicates and lost seqs not counted)."""
        return self.stats.events

    def is_duplicate(self, seq: int) -> bool:
        """Already processed (or already waiting for its turn)."""
        return seq <= self.last_seq or seq in self.waiting

    def decisions_for(self, seq: int) -> list[Decision]:
        """What processing event ``seq`` decided, while it is among the recent ones."""
        self.stats.duplicates += 1
        for decided_seq, decisions in self.recent:
            if decided_seq == seq:
                return list(decisions)
        return []

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
        if window is not None:  # released by an operator: warnings only (issue 43)
            decisions = window.soften(decisions)
            if self.status == ABORTED and status != ABORTED:
                self.status = status
            self.blocks = blocks
            if isinstance(event, ToolCall):
                window.took_call()
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
            self._take_over(self.predecessor, event, cfg)
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
            self._settle_held(self.held, event, cfg)
        if isinstance(event, ToolCall):
            return self._on_call(event, cfg)
        if isinstance(event, ToolResult):
            return self._on_result(event, cfg)
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

    def _on_call(self, event: ToolCall, cfg: LoopDetectionConfig) -> list[Decision]:
        # perTool: the tool's own view of the config (thresholds, exempt detectors), if any
        per_tool = cfg.per_tool
        view = per_tool.get(event.tool_name) if per_tool else None
        ignored = None if view is None else view.ignored_args
        info = call_info(event.tool_name, event.args_json, cfg.hash_rules, ignored)
        sig, known_poll, action = info.sig, info.known_poll, info.action
        hit = detect_with_failures(
            self.history,
            self.error_streak,
            event.tool_name,
            sig,
            known_poll,
            cfg if view is None else view,
        )
        if hit is None or hit.level != CRITICAL:  # the rules that see progress (issue 38)
            hit = detect_progress(
                hit,
                self.history,
                self.outcomes,
                CurrentCall(event.tool_name, sig, known_poll),
                event.args_json,
                cfg if view is None else view,
            )
        if self.failing.entries and (hit is None or hit.level != CRITICAL):  # issue 44
            hit = detect_across_runs(
                hit,
                self.failing,
                CurrentCall(event.tool_name, sig, known_poll),
                event.args_json,
                cfg if view is None else view,
            )
        if event.turn_id is not None:  # one turn's calls as a set (issue 44, bursts.py)
            hit = self.turn.judge(
                hit,
                event.turn_id,
                CurrentCall(event.tool_name, sig, known_poll),
                event.args_json,
                cfg if view is None else view,
            )
        if hit is not None and hit.level == CRITICAL and not cfg.deviations.veto_is_outcome:
            # As the reference: a blocked call is not recorded (nor its veto an outcome), unless
            # it runs anyway: held until the next event says which (held_call.py).
            decision = self._decide(event, CurrentCall(event.tool_name, sig, known_poll), hit, cfg)
            if self.status == ACTIVE:
                kept = action if isinstance(action, str) else None
                self.held = HeldCall(event.tool_name, sig, event.tool_call_id, known_poll, kept)
            return [decision]
        record = self.history.append_call(
            event.tool_name,
            sig,
            event.tool_call_id,
            known_poll,
            action if isinstance(action, str) else None,
        )
        args = event.args_json
        if event.tool_call_id and args is not None and len(args) <= MEMO_MAX_CHARS:
            record.call_args = (args, info)
        if hit is None:
            return []
        return [self._decide(event, CurrentCall(event.tool_name, sig, known_poll), hit, cfg)]

    def _settle_held(self, held: HeldCall, event: AgentEvent, cfg: LoopDetectionConfig) -> None:
        """The blocked call ran unless ``event`` is its veto: then it takes its slot, where
        the reference recorded it, before ``event``."""
        self.held = None
        if not held.vetoed_by(event, cfg.hash_rules):
            self.history.append_call(
                held.tool_name, held.sig, held.tool_call_id, held.known_poll, held.action
            )

    def _on_result(self, event: ToolResult, cfg: LoopDetectionConfig) -> list[Decision]:
        tool_name = event.tool_name
        rules, devs = cfg.hash_rules, cfg.deviations
        per_tool = cfg.per_tool  # perTool: one lookup, none at all when it is empty
        view = per_tool.get(tool_name) if per_tool else None
        ignored = None if view is None else view.ignored_args
        if event.args_json is None and (
            devs.result_args_by_call_id if event.tool_call_id else devs.result_to_open_call
        ):
            # Results may omit args when they carry the call id: hash with what the call had.
            if event.tool_call_id:
                record = self.history.find_pending(tool_name, None, event.tool_call_id)
                call = record or self.history.find_call(tool_name, event.tool_call_id)
            else:  # neither args nor id: only the tool's newest open call can be meant
                record = call = self.history.newest_pending(tool_name)
                if call is None:  # it matches no call (failures.unmatched_error_streak)
                    self.error_streak = unmatched_error_streak(self.error_streak, event, cfg)
                    return []
            if call is not None:
                sig, known_poll, action = call.sig, call.known_poll, call.action or None
            else:  # the call is out of the window (or never seen): no args known
                info = call_info(tool_name, "{}", rules, ignored)
                sig, known_poll, action = info.sig, info.known_poll, info.action
        else:  # its own args (with those switches off: what it carries, maybe none)
            record = self.history.pending_by_id.get(event.tool_call_id or "")
            if (
                record is not None
                and (seen := record.call_args) is not None
                and record.tool_name == tool_name
                and seen[0] == event.args_json
            ):
                # The result echoes its call's args text: same text, same call_info, and
                # find_pending would return this very record.
                info = seen[1]
            else:
                info = call_info(tool_name, event.args_json, rules, ignored)
                record = self.history.find_pending(tool_name, info.sig, event.tool_call_id)
            sig, known_poll, action = info.sig, info.known_poll, info.action
        if view is None:
            outcome = result_outcome(tool_name, action, event.result_json, event.error, rules)
        elif view.volatile is None:  # its own hash_rules: statusResult (status_results.py)
            outcome = result_outcome(
                tool_name, action, event.result_json, event.error, view.hash_rules
            )
        else:
            outcome = stripped_result_outcome(
                tool_name, action, event.result_json, event.error, view.volatile, view.hash_rules
            )
        if outcome.result_hash is None and not (outcome.loop_veto and devs.veto_is_outcome):
            # No result and no error: nothing to compare, so, as in the reference, it is not
            # an outcome at all; the call stays open for a result that says something. The
            # same for a veto when it is no outcome (``deviations.vetoIsOutcome`` off).
            return []
        if not outcome.loop_veto:  # failures.next_error_streak, inlined (every result)
            if event.error is None:
                self.error_streak = 0
            elif view is None or "consecutiveErrors" not in view.exempt:
                # an exempt tool's failures leave the streak as it is (its successes end it)
                self.error_streak += 1
            if (event.error is not None or self.failing.entries) and remembers_failures(
                cfg if view is None else view
            ):  # the session's failing calls (session_failures.py)
                if event.error is None:
                    self.failing.succeeded(sig)
                else:
                    self.failing.failed(sig, event.error, self.run_id)
        if self.turn.turn_id is not None and outcome.result_hash and not outcome.loop_veto:
            self.turn.answer(sig, outcome.result_hash)  # a result of the turn's calls
        if record is not None:
            self.history.attach_result(record, outcome)
        else:
            record = self.history.append_result(
                tool_name,
                sig,
                event.tool_call_id,
                known_poll,
                action if isinstance(action, str) else None,
                outcome,
            )
        if not outcome.loop_veto and cfg.enabled is True:
            self._remember_outcome(record, tool_name, outcome, event.error, cfg)
        guard = self.guard
        if guard.compacted and not guard.progressed and not outcome.loop_veto:
            # compaction storm: an outcome unlike its call's previous one is progress
            guard.outcome(record.no_progress_run == 1)
        if not (guard.remaining and cfg.compaction_guard_on):  # guard.armed, inlined
            return []
        if view is not None and "postCompactionGuard" in view.exempt:
            return []  # the guard does not see an exempt tool's outcomes (nor spend its window)
        # The guard compares exact results (its rule: only identical results abort), not the
        # masked hash the rolling detectors use.
        loop = guard.observe(record.tool_name, record.sig, outcome.exact_hash or record.result_hash)
        if loop is None:
            return []
        self.status = ABORTED
        return [compaction_loop_decision(self.run_id, event, cfg, loop)]

    def _remember_outcome(
        self,
        record: CallRecord,
        tool_name: str,
        outcome: Outcome,
        error: str | None,
        cfg: LoopDetectionConfig,
    ) -> None:
        """Feed the whole-run memory of the rules that see progress (outcome_memory.py)."""
        memory = self.outcomes
        if error is None:
            memory.changed(tool_name)
        result_hash = outcome.result_hash
        if not cfg.detectors.unchanged_outcome or result_hash is None or outcome.empty:
            return
        if outcome.counters:  # a status report: its counters moved with the calls between
            return
        index, within = record.index, cfg.history_size
        if memory.streaks:
            memory.drop_stale(index, within)
        if memory.extend(record.sig, result_hash, index, within):
            return
        previous = record.prev_same_sig  # the call's previous outcome, if still in the window
        while previous is not None and previous.result_hash is None:
            previous = previous.prev_same_sig
        if (
            previous is not None
            and previous.result_hash == result_hash
            and index - previous.index <= within
        ):
            edits = self.history.changes_since(previous.index, CHANGING_TOOLS)
            memory.begin(record.sig, result_hash, previous.index, index, memory.changes - edits)

    def _storm(self, event: CompactionRetry, cfg: LoopDetectionConfig, storm: int) -> Decision:
        self.status = ABORTED
        records = self.history.records
        tool_name = records[-1].tool_name if records else ""
        return compaction_storm_decision(self.run_id, event, cfg, storm, tool_name)

    def _decide(
        self, event: ToolCall, call: CurrentCall, hit: Detection, cfg: LoopDetectionConfig
    ) -> Decision:
        if hit.level == CRITICAL:
            self.blocks += 1
        view = cfg.per_tool.get(event.tool_name)
        ignored = ignored_args(  # named in the decision (call_identity.py)
            event.tool_name,
            parse_json(event.args_json),
            cfg.hash_rules,
            None if view is None else view.ignored_args,
        )
        decision = detection_decision(self.run_id, event, call, hit, cfg, self.blocks, ignored)
        if decision.action is Action.ABORT:
            self.status = ABORTED
        return decision

    # -- session scope (streams.core.session) ----------------------------------------

    def session_carry(self) -> SessionCarry:
        """A copy of what this run's successor in its session carries over."""
        return SessionCarry(
            run_id=self.run_id,
            history_size=self.history.max_size,
            next_index=self.history.next_index,
            history=self.history.to_list(),
            guard=self.guard.to_dict(),
            error_streak=self.error_streak,
            blocks=self.blocks,
            outcomes=self.outcomes.to_list() if self.outcomes.streaks else None,
            failing=self.failing.to_list() if self.failing.entries else None,
            last_event_time=self.last_event_time,
            own_from=self.own_from,
        )

    def _take_over(self, carry: SessionCarry, first: AgentEvent, cfg: LoopDetectionConfig) -> None:
        """Seed a run from its session's previous run, unless it has processed events already;
        a run that starts fresh (a fresh trigger, or a late start) takes only the session's
        failing calls."""
        self.predecessor = None
        if self.stats.events:
            return
        if carry.failing is not None:
            self.failing = FailingCalls.from_list(carry.failing)
        if starts_fresh(first, cfg) or resumes_late(carry.last_event_time, first, cfg):
            return
        self.history = RunHistory.rebuild(carry.history_size, carry.next_index, carry.history)
        self.guard = PostCompactionGuard.from_dict(carry.guard)
        self.error_streak = carry.error_streak
        self.blocks = carry.blocks
        self.own_from = carry.next_index
        if carry.outcomes is not None:
            self.outcomes = OutcomeMemory.from_list(carry.outcomes)
            keep_loop_streaks(self.outcomes, self.history, carry.own_from)

    # -- persistence (Faust table values) ---------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return self._as_dict(
            [[seq, [recent_decision_dict(d) for d in ds]] for seq, ds in self.recent]
        )

    def snapshot(self) -> dict[str, Any]:
        """What :meth:`from_dict` restores, taken to roll a failed event back: as
        :meth:`to_dict`, but the decisions the run keeps stay objects (frozen, so nothing to
        copy; converting each to a dict was most of what a snapshot cost)."""
        return self._as_dict([[seq, list(ds)] for seq, ds in self.recent])

    def _as_dict(self, recent: list[list[Any]]) -> dict[str, Any]:
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "gateway_id": self.gateway_id,
            "last_seq": self.last_seq,
            "status": self.status,
            "blocks": self.blocks,
            "error_streak": self.error_streak,
            "last_event_time": self.last_event_time,
            "last_seq_time": self.last_seq_time,
            "waiting": [event_to_dict(self.waiting[seq]) for seq in sorted(self.waiting)],
            "history_size": self.history.max_size,
            "next_index": self.history.next_index,
            "history": self.history.to_list(),
            "guard": self.guard.to_dict(),
            "stats": [self.stats.events, self.stats.duplicates, self.stats.gaps, self.stats.late],
            "recent": recent,
        }
        if self.session_id:  # states of runs without a session read and compare as before
            data["session_id"] = self.session_id
        if self.usage.reported:  # likewise for runs whose gateway reports no usage
            data["usage"] = self.usage.to_list()
        if self.held is not None:  # likewise (issue 38)
            data["held"] = self.held.to_list()
        if self.outcomes.streaks or self.outcomes.changes:  # likewise (issue 38)
            data["outcomes"] = self.outcomes.to_list()
        if self.turn.turn_id is not None:  # likewise (issue 44): runs without turn ids
            data["turn"] = self.turn.to_list()
        if self.failing.entries:  # likewise (issue 44)
            data["failing"] = self.failing.to_list()
        if self.own_from:  # likewise (issue 44): a run seeded from its session's previous run
            data["own_from"] = self.own_from
        if self.release is not None:  # likewise (issue 43): a run an operator released
            data["release"] = self.release.to_list()
        if self.commands:  # likewise (issue 43)
            data["commands"] = list(self.commands)
        return data

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
        for item in data["waiting"]:
            event = event_from_dict(item)
            state.waiting[event.envelope.seq] = event
        state.history = RunHistory.rebuild(
            data["history_size"], data["next_index"], data["history"]
        )
        state.guard = PostCompactionGuard.from_dict(data["guard"])
        state.stats = RunStats(*data["stats"])
        usage = data.get("usage")  # states written before issue 28, or without usage: none
        if usage:
            state.usage = RunUsage.from_list(usage)
        held = data.get("held")  # states written before issue 38, or holding none: none
        if held:
            state.held = HeldCall.from_list(held)
        outcomes = data.get("outcomes")  # states written before issue 38: none
        if outcomes:
            state.outcomes = OutcomeMemory.from_list(outcomes)
        turn = data.get("turn")  # states written before issue 44, or without turns: none
        if turn:
            state.turn = TurnCalls.from_list(turn)
        failing = data.get("failing")  # states written before issue 44: none
        if failing:
            state.failing = FailingCalls.from_list(failing)
        state.own_from = data.get("own_from", 0)  # states written before issue 44: 0
        release = data.get("release")  # states written before issue 43, or never released
        if release:
            state.release = ReleaseWindow.from_list(release)
        state.commands = list(data.get("commands", []))
        for seq, decisions in data.get("recent", []):
            kept = [d if isinstance(d, Decision) else Decision.from_dict(d) for d in decisions]
            keep_recent(state.recent, seq, kept)
        return state
