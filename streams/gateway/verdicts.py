"""The gateway's side of the control topic: what the worker decided about each run and how
far it has processed it, and the verdict a run's next tool call gets from them.

A block refuses exactly the run's next call (or, limited to a tool, the agent's next call of
that tool); an abort ends the run; an observe-only decision is logged and ignored. A verdict
first waits (at most the wait budget) for the worker's watermark to reach what the run
published; a guard that does not answer in time is counted, logged at most once per
interval, and fails open or closed.

Every gateway reads the whole control topic, so it hears of every run in the fleet: it keeps
the runs it publishes for or asks about and counts the rest (``other_runs``); of its ended
runs it keeps the last ``ended_runs_kept``, so its memory follows its own live runs, not the
fleet's history (as the TypeScript client's).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from streams.core.events import RELEASE_DETECTOR, Action, Decision
from streams.gateway.throttle import LogThrottle
from streams.wire.avro import CodecError, RunWatermark, RunWatermarks, decode_control
from streams.wire.signing import KeyRing

log = logging.getLogger("loopguard.gateway")
TIMEOUT_LOG_INTERVAL = 10.0  # seconds between "had not processed" warnings
ENDED_RUNS_KEPT = 1000  # ended runs whose decisions stay readable (the TypeScript default)


# The decision's note for the model (``extra["model_note"]``, streams.core.model_notes: set
# when its agent's config says ``warnings: "model"``); read here without importing the core's
# wording, which the client distribution does not ship.
MODEL_NOTE = "model_note"


def model_note(decision: Decision) -> str:
    """What the model should be told about ``decision``; "" when its agent's warnings go to
    the log only."""
    note = decision.extra.get(MODEL_NOTE)
    return note if isinstance(note, str) else ""


class RunAborted(RuntimeError):
    """loopguard aborted the run; the gateway must stop it and report ``decision.reason``."""

    def __init__(self, decision: Decision) -> None:
        code = decision.error_code or decision.detector
        reason = decision.reason
        # Some reasons already start with their code; say it once.
        super().__init__(reason if reason.startswith(f"{code}:") else f"{code}: {reason}")
        self.decision = decision
        # What to tell the model as the refused call's result ("" under warnings "log").
        self.model_note = model_note(decision)


OBSERVED_EFFECT = {
    Action.WARN: "warn",
    Action.BLOCK: "block the next tool call",
    Action.ABORT: "abort the run",
}


def log_observed(decision: Decision) -> None:
    """One line for an observe-only decision: what enforcing it would have done."""
    log.warning(
        "run %s (agent %s): observe only, loopguard would %s at seq %d: %s [%s, decision %s]",
        decision.run_id,
        decision.agent_id,
        OBSERVED_EFFECT[decision.action],
        decision.seq,
        decision.reason,
        decision.detector,
        decision.decision_id,
    )


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    warnings: tuple[Decision, ...] = ()
    blocked_by: Decision | None = None
    timed_out: bool = False  # the guard had not caught up within the wait budget
    reason: str = ""  # why the call is refused, when it is (its note for the model, if any)

    @property
    def model_note(self) -> str:
        """The warnings' notes for the model (``warnings: "model"``), for the host to attach
        to this call's tool result, the next one the model sees; "" when there are none.
        Publish the tool's own result (``after_tool``) without it: a note differs from call
        to call, so a loop's outcomes would never repeat."""
        return "\n\n".join(note for note in map(model_note, self.warnings) if note)


@dataclass
class RunControl:
    """What the control topic said about one run so far."""

    warnings: list[Decision] = field(default_factory=list)
    block: Decision | None = None
    abort: Decision | None = None
    seen: set[str] = field(default_factory=set)
    decisions: list[Decision] = field(default_factory=list)
    watermark: int = 0  # highest seq of the run the worker has processed
    # The calls waiting on this run (on the state's lock), made by the first such wait: a
    # record wakes its own run's callers only, not every caller of a thousand-agent gateway.
    changed: threading.Condition | None = None

    def notify(self) -> None:
        """With the state's lock held: wake the calls waiting on this run."""
        if self.changed is not None:
            self.changed.notify_all()


class ControlState:
    """Decisions and watermarks per run, as the control topic's reader hands them over (on
    its thread), and the verdicts and waits the gateway's calls ask for (on theirs)."""

    def __init__(
        self,
        gateway_id: str,
        wait_budget_ms: float = 50.0,
        fail_mode: str = "open",
        on_decision: Callable[[Decision], None] | None = None,
        on_watermark: Callable[[RunWatermark], None] | None = None,
        ended_runs_kept: int = ENDED_RUNS_KEPT,
        keys: KeyRing | None = None,
    ) -> None:
        if fail_mode not in ("open", "closed"):
            raise ValueError(f"fail_mode must be 'open' or 'closed', not {fail_mode!r}")
        self.gateway_id = gateway_id
        self.wait_budget = wait_budget_ms / 1000
        self.fail_mode = fail_mode
        self.wait_timeouts = 0
        self._timeout_log = LogThrottle(TIMEOUT_LOG_INTERVAL)
        self.on_decision = on_decision
        self.on_watermark = on_watermark  # each run's progress as it arrives (benchmarks)
        # The runs this gateway publishes for or asks about; a record of any other run is
        # only counted in other_runs. Looking a run up through this dict (not .get) tracks it.
        self._control: dict[str, RunControl] = defaultdict(RunControl)
        self._ended: OrderedDict[str, None] = OrderedDict()  # oldest first
        self.ended_runs_kept = ended_runs_kept
        self.other_runs = 0
        # (agent id, tool) -> a block for that agent's next call of that tool (agent_cycle)
        self._tool_blocks: dict[tuple[str, str], Decision] = {}
        self.duplicates = 0
        # issue 40: with this gateway's keys, only control records a worker signed for it
        # count; the others of its runs are counted here (and logged), never applied.
        self.keys = keys
        self.forged = 0
        self._forged_log = LogThrottle(TIMEOUT_LOG_INTERVAL)
        self._lock = threading.Condition()

    def track(self, run_id: str, ended: bool = False) -> None:
        """A run this gateway publishes for: its records are kept from now on. ``ended``: its
        last event; it then stays among the last ``ended_runs_kept`` ended runs."""
        if not ended and run_id in self._control and run_id not in self._ended:
            return  # the common case, a live run's next event: no lock
        with self._lock:
            self._control[run_id]
            if not ended:
                self._ended.pop(run_id, None)
                return
            self._ended[run_id] = None
            self._ended.move_to_end(run_id)
            while len(self._ended) > self.ended_runs_kept:
                oldest, _ = self._ended.popitem(last=False)
                self._control.pop(oldest, None)

    def tracked_runs(self) -> int:
        """Runs whose records this gateway keeps (live ones and the last ended ones)."""
        with self._lock:
            return len(self._control)

    def on_control(self, record: Any) -> None:
        try:
            message = decode_control(record.value)
        except CodecError as exc:
            log.warning("skipping undecodable control message: %s", exc)
            return
        if self.keys is not None:
            refused = self.keys.check(getattr(record, "headers", None), record.value or b"")
            if refused:
                self._refuse(message, refused, record)
                return
        if isinstance(message, RunWatermarks):
            self._on_watermarks(message.marks)
        elif isinstance(message, RunWatermark):
            self._on_watermarks((message,))
        else:
            self._on_decision(message)

    def _refuse(self, message: Any, why: str, record: Any) -> None:
        """A control record no worker signed for this gateway: another gateway's (counted in
        ``other_runs``), or, when it names a run of ours, forged (``forged``, logged)."""
        marks = message.marks if isinstance(message, RunWatermarks) else (message,)
        with self._lock:
            ours = any(mark.run_id in self._control for mark in marks)
            if not ours:
                self.other_runs += 1
                return
            self.forged += 1
            logged = self._forged_log.admit()
            held_back = self._forged_log.take_held_back() if logged else 0
        if logged:
            log.warning(
                "ignoring a control record for run %s that no worker signed for this gateway "
                "(%s, %s[%s]@%s)%s",
                marks[0].run_id,
                why,
                getattr(record, "topic", "control"),
                getattr(record, "partition", "?"),
                getattr(record, "offset", "?"),
                f" ({held_back} more since the last such line)" if held_back else "",
            )

    def _on_watermarks(self, marks: Sequence[RunWatermark]) -> None:
        """A run's watermark, or a batch's (one lock for all): each wakes its run's waits."""
        with self._lock:
            for mark in marks:
                control = self._control.get(mark.run_id)
                if control is None:
                    self.other_runs += 1
                elif mark.seq > control.watermark:
                    control.watermark = mark.seq
                    control.notify()
        if self.on_watermark is not None:
            for mark in marks:
                self.on_watermark(mark)

    def _on_decision(self, decision: Decision) -> None:
        """Put a decision in effect for its run; one for a run this gateway does not keep
        only reaches ``on_decision`` (and a block limited to a tool, when it is this
        gateway's agent's, still waits for that agent's next call of the tool)."""
        only_tool = self._tool_block_of(decision) if decision.enforced else ""
        with self._lock:
            control = self._control.get(decision.run_id)
            ours = control is not None
            if control is not None and decision.decision_id in control.seen:
                self.duplicates += 1
                return  # redelivered after a worker restart: already in effect
            if only_tool and decision.gateway_id == self.gateway_id:
                # a loop between agents (issue 28): the agent's next call of that tool, in
                # whichever of its runs comes (OpenClaw starts a run per message); never the
                # run's next call whatever the tool, nor another gateway's agent's
                self._tool_blocks[(decision.agent_id, only_tool)] = decision
            if control is None:
                self.other_runs += 1
            else:
                self._apply(control, decision, only_tool)
        if ours and not decision.enforced:
            log_observed(decision)
        if self.on_decision is not None:
            self.on_decision(decision)

    @staticmethod
    def _apply(control: RunControl, decision: Decision, only_tool: str) -> None:
        """With the lock held: a run's new decision, and its waits woken."""
        control.seen.add(decision.decision_id)
        control.decisions.append(decision)
        if decision.enforced and not only_tool:  # shadow mode's are only logged
            if decision.detector == RELEASE_DETECTOR:  # an operator released the run
                control.block = None  # (issue 43): its next call goes through
            if decision.action is Action.ABORT:
                control.abort = decision
            elif decision.action is Action.BLOCK:
                control.block = decision
            else:
                control.warnings.append(decision)
        control.notify()

    def _tool_block_of(self, decision: Decision) -> str:
        """The tool a block is limited to (``extra["only_tool"]``); "" for every other
        decision."""
        raw = decision.extra.get("only_tool")
        if decision.action is not Action.BLOCK or not raw:
            return ""
        try:
            tool = json.loads(raw)
        except ValueError:
            return ""
        return tool if isinstance(tool, str) else ""

    def decisions(self, run_id: str) -> list[Decision]:
        with self._lock:
            return list(self._control[run_id].decisions)

    def wait_for(
        self, run_id: str, predicate: Callable[[list[Decision]], Any], timeout: float = 10.0
    ) -> list[Decision]:
        """Block until ``predicate(decisions)`` holds for the run (tests, demo, tooling)."""
        with self._lock:
            control = self._control[run_id]
            if not self._wait_until(control, lambda: predicate(list(control.decisions)), timeout):
                raise TimeoutError(
                    f"run {run_id}: condition not met in {timeout}s ({len(control.decisions)} seen)"
                )
            return list(control.decisions)

    def wait_processed(self, run_id: str, seq: int, timeout: float = 10.0) -> None:
        """Block until the worker says it has processed the run up to ``seq`` (its watermark
        on the control topic): every record the worker writes for those events is out."""
        with self._lock:
            control = self._control[run_id]
            if not self._wait_until(control, lambda: control.watermark >= seq, timeout):
                raise TimeoutError(
                    f"run {run_id}: worker processed up to seq {control.watermark}, "
                    f"not {seq}, in {timeout}s"
                )

    def _wait_until(self, control: RunControl, done: Callable[[], bool], timeout: float) -> bool:
        """With the lock held: wait for the control thread's news of this run until ``done()``
        or ``timeout`` seconds; whether it is done."""
        deadline = time.monotonic() + timeout
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if control.changed is None:
                control.changed = threading.Condition(self._lock)
            control.changed.wait(remaining)
        return True

    def take_verdict(
        self, run_id: str, published_seq: int = 0, tool_name: str = "", agent_id: str = ""
    ) -> Verdict:
        """The run's verdict once the worker has processed up to ``published_seq``, or at the
        end of the wait budget, whichever comes first. ``tool_name`` and ``agent_id``: the call
        about to run, which a block limited to that tool refuses."""
        if self.wait_budget <= 0:
            published_seq = 0  # no waiting: enforce whatever has arrived (no timeout either)
        with self._lock:
            control = self._control[run_id]
            self._wait_until(
                control,
                lambda: control.watermark >= published_seq or control.abort is not None,
                self.wait_budget,
            )
            if control.abort is not None:
                raise RunAborted(control.abort)
            timed_out = control.watermark < published_seq
            warnings, control.warnings = tuple(control.warnings), []
            block, control.block = control.block, None
            if block is None and tool_name:
                block = self._tool_blocks.pop((agent_id, tool_name), None)
            logged, held_back = False, 0
            if timed_out:
                self.wait_timeouts += 1
                if logged := self._timeout_log.admit():
                    held_back = self._timeout_log.take_held_back()
        if block is not None:
            return Verdict(False, warnings, block, timed_out, model_note(block) or block.reason)
        if logged:
            log.warning(
                "run %s: loopguard had not processed seq %d within %.0f ms; failing %s%s",
                run_id,
                published_seq,
                self.wait_budget * 1000,
                self.fail_mode,
                f" ({held_back} more timed out since the last such line)" if held_back else "",
            )
        if timed_out and self.fail_mode == "closed":
            reason = f"loopguard did not answer within {self.wait_budget * 1000:.0f} ms"
            return Verdict(False, warnings, None, True, reason)
        return Verdict(True, warnings, None, timed_out)
