"""Gateway side of loopguard: publish a run's tool events, obey the control topic.

A gateway wraps each tool cycle in a few calls::

    guard = GatewayClient("127.0.0.1:9092", gateway_id="gw-1")
    run = guard.start_run(agent_id="support-bot")
    verdict = run.before_tool("exec", {"command": "make test"})   # raises RunAborted
    if verdict.allowed:
        result = execute(...)
        run.after_tool("exec", {"command": "make test"}, result=result)
    run.end()

Decisions arrive on a background thread; ``before_tool`` enforces the newest one for the run
before the tool runs: a block refuses exactly that next cycle (and reports the refusal as
the call's outcome, so the worker's no-progress streak keeps counting), an abort ends the run.
An observe-only decision (``enforced`` false: the agent's config is ``mode: "observe"``) is
logged once ("would block ...") and otherwise ignored: shadow mode never refuses a call.

In time: after each batch the worker publishes a :class:`RunWatermark` per run behind that
run's decisions, so ``before_tool`` first waits (at most ``wait_budget_ms``) until the worker
has processed everything this run published. A guard that does not answer in time is
counted in ``wait_timeouts`` and logged; ``fail_mode="open"`` lets the call run,
``"closed"`` refuses it.
Every partition of the control topic is read without a consumer group, so a gateway starts
hearing decisions at once instead of waiting for a group join.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaProducer

from streams.core.events import (
    Action,
    AgentEvent,
    CompactionRetry,
    Decision,
    Envelope,
    RunEnded,
    RunStarted,
    ToolCall,
    ToolResult,
    partition_key,
)
from streams.core.usage import clean_cost, clean_tokens
from streams.gateway.throttle import LogThrottle
from streams.kafka.reader import TopicFollower
from streams.kafka.schema_topic import publish_schema
from streams.settings import Topics
from streams.wire.avro import (
    CodecError,
    RunWatermark,
    decode_control,
    encode_event,
    event_schema_json,
)
from streams.wire.schema_registry import default_registry

log = logging.getLogger("loopguard.gateway")
TIMEOUT_LOG_INTERVAL = 10.0  # seconds between "had not processed" warnings

LOOP_VETO_RESULT = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}


class RunAborted(RuntimeError):
    """loopguard aborted the run; the gateway must stop it and report ``decision.reason``."""

    def __init__(self, decision: Decision) -> None:
        code = decision.error_code or decision.detector
        reason = decision.reason
        # Some reasons already start with their code; say it once.
        super().__init__(reason if reason.startswith(f"{code}:") else f"{code}: {reason}")
        self.decision = decision


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
    reason: str = ""  # why the call is refused, when it is


@dataclass
class _RunControl:
    warnings: list[Decision] = field(default_factory=list)
    block: Decision | None = None
    abort: Decision | None = None
    seen: set[str] = field(default_factory=set)
    decisions: list[Decision] = field(default_factory=list)
    watermark: int = 0  # highest seq of the run the worker has processed


class GatewayClient:
    # The Avro schema this client writes with; announced on the schemas topic at start.
    writer_schema_json = event_schema_json()

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        gateway_id: str,
        topics: Topics | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        wait_budget_ms: float = 50.0,
        fail_mode: str = "open",
        fetch_max_wait_ms: int = 20,
        on_watermark: Callable[[RunWatermark], None] | None = None,
        **kafka_options: Any,
    ) -> None:
        if fail_mode not in ("open", "closed"):
            raise ValueError(f"fail_mode must be 'open' or 'closed', not {fail_mode!r}")
        self.gateway_id = gateway_id
        self.wait_budget = wait_budget_ms / 1000
        self.fail_mode = fail_mode
        self.wait_timeouts = 0
        self._timeout_log = LogThrottle(TIMEOUT_LOG_INTERVAL)
        self.topics = topics or Topics()
        self.on_decision = on_decision
        self.on_watermark = on_watermark  # each run's progress as it arrives (benchmarks)
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers, acks="all", linger_ms=0, **kafka_options
        )
        self._control: dict[str, _RunControl] = defaultdict(_RunControl)
        # (agent id, tool) -> a block for that agent's next call of that tool (agent_cycle)
        self._tool_blocks: dict[tuple[str, str], Decision] = {}
        self.duplicates = 0
        self._lock = threading.Condition()
        # Only what is published from now on counts: follow the control topic from its end.
        self._follower = TopicFollower(
            bootstrap_servers,
            self.topics.control,
            self._on_control,
            from_end=True,
            poll_ms=100,
            thread_name="loopguard-control",
            # Apache Kafka answers a waiting fetch as soon as a decision arrives, so this only
            # paces idle fetches; tansu holds every fetch for the whole wait, so there it is
            # how late a decision may be seen: pass the tansu profile's (5 ms) there.
            fetch_max_wait_ms=fetch_max_wait_ms,
            isolation_level="read_committed",  # a worker's aborted transaction is no decision
            **kafka_options,
        )
        if not self._follower.open(wait=30):  # until workers created it
            raise RuntimeError(
                f"control topic {self.topics.control!r} not found; is a worker running?"
            )
        publish_schema(
            self._producer, self.topics.schemas, default_registry(), self.writer_schema_json
        )
        self._follower.start()

    def _on_control(self, record: Any) -> None:
        try:
            message = decode_control(record.value)
        except CodecError as exc:
            log.warning("skipping undecodable control message: %s", exc)
            return
        if isinstance(message, RunWatermark):
            self._on_watermark(message)
        else:
            self._on_decision(message)

    def _on_watermark(self, mark: RunWatermark) -> None:
        with self._lock:
            control = self._control[mark.run_id]
            if mark.seq > control.watermark:
                control.watermark = mark.seq
                self._lock.notify_all()
        if self.on_watermark is not None:
            self.on_watermark(mark)

    def _on_decision(self, decision: Decision) -> None:
        with self._lock:
            control = self._control[decision.run_id]
            if decision.decision_id in control.seen:
                self.duplicates += 1
                return  # redelivered after a worker restart: already in effect
            control.seen.add(decision.decision_id)
            control.decisions.append(decision)
            if decision.enforced:  # shadow mode's decisions are only logged (below)
                if only_tool := self._tool_block_of(decision):
                    # a loop between agents (issue 28): the agent's next call of that tool,
                    # in whichever of its runs comes (OpenClaw starts a run per message);
                    # never the run's next call whatever the tool, nor another gateway's
                    if decision.gateway_id == self.gateway_id:
                        self._tool_blocks[(decision.agent_id, only_tool)] = decision
                elif decision.action is Action.ABORT:
                    control.abort = decision
                elif decision.action is Action.BLOCK:
                    control.block = decision
                else:
                    control.warnings.append(decision)
            self._lock.notify_all()
        if not decision.enforced:
            log_observed(decision)
        if self.on_decision is not None:
            self.on_decision(decision)

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

    # -- publishing ------------------------------------------------------------------

    def publish(self, event: AgentEvent) -> None:
        # keyed by the session id when the run has one: a session's runs share a partition
        key = partition_key(event.envelope).encode()
        self._producer.send(self.topics.events, key=key, value=encode_event(event))

    def flush(self) -> None:
        self._producer.flush()

    def start_run(
        self,
        agent_id: str,
        run_id: str | None = None,
        session_id: str | None = None,
        trigger: str | None = None,
    ) -> GatewayRun:
        """Start a run; ``session_id`` names the conversation it belongs to (``scope:
        "session"`` carries a loop's counts over to its next run) and ``trigger`` what
        started it ("user", "heartbeat", "cron", "compaction", ...)."""
        run = GatewayRun(self, run_id or uuid.uuid4().hex, agent_id, session_id)
        run.emit(RunStarted, trigger=trigger)
        return run

    # -- decisions -------------------------------------------------------------------

    def decisions(self, run_id: str) -> list[Decision]:
        with self._lock:
            return list(self._control[run_id].decisions)

    def wait_for(self, run_id: str, predicate, timeout: float = 10.0) -> list[Decision]:
        """Block until ``predicate(decisions)`` holds for the run (tests, demo, tooling)."""
        with self._lock:
            control = self._control[run_id]
            if not self._wait_until(lambda: predicate(list(control.decisions)), timeout):
                raise TimeoutError(
                    f"run {run_id}: condition not met in {timeout}s ({len(control.decisions)} seen)"
                )
            return list(control.decisions)

    def wait_processed(self, run_id: str, seq: int, timeout: float = 10.0) -> None:
        """Block until the worker says it has processed the run up to ``seq`` (its watermark
        on the control topic): every record the worker writes for those events is out."""
        with self._lock:
            control = self._control[run_id]
            if not self._wait_until(lambda: control.watermark >= seq, timeout):
                raise TimeoutError(
                    f"run {run_id}: worker processed up to seq {control.watermark}, "
                    f"not {seq}, in {timeout}s"
                )

    def _wait_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """With the lock held: wait for the control thread until ``done()`` or ``timeout``
        seconds; whether it is done."""
        deadline = time.monotonic() + timeout
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._lock.wait(remaining)
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
            return Verdict(False, warnings, block, timed_out, block.reason)
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

    def close(self) -> None:
        self._follower.stop()
        self._producer.flush()
        self._producer.close()


class GatewayRun:
    """One agent run: numbers its events and applies loopguard's decisions to its cycles."""

    def __init__(
        self, client: GatewayClient, run_id: str, agent_id: str, session_id: str | None = None
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.agent_id = agent_id
        self.session_id = session_id or None
        self.seq = 0
        self.events: list[AgentEvent] = []  # what this run published, in order (audits, tests)
        # Usage reported since the last event that carried it (input, output, cost or None).
        self._usage: tuple[int, int, float | None] | None = None

    def report_usage(
        self,
        input_tokens: int | None = 0,
        output_tokens: int | None = 0,
        cost_usd: float | None = None,
    ) -> None:
        """A model turn's usage (issue 28): it goes out with the run's next tool call or its
        end (the events that carry a turn), added to whatever else was reported meanwhile.
        Negative or non-finite values count nothing."""
        held_in, held_out, held_cost = self._usage or (0, 0, None)
        cost = clean_cost(cost_usd) if cost_usd is not None else None
        if cost is not None or held_cost is not None:
            held_cost = (held_cost or 0.0) + (cost or 0.0)
        self._usage = (
            held_in + clean_tokens(input_tokens),
            held_out + clean_tokens(output_tokens),
            held_cost,
        )

    def _take_usage(self) -> dict[str, Any]:
        usage, self._usage = self._usage, None
        if usage is None:
            return {}
        return {"input_tokens": usage[0], "output_tokens": usage[1], "cost_usd": usage[2]}

    def emit(self, kind: type, **fields: Any) -> AgentEvent:
        self.seq += 1
        envelope = Envelope(
            self.run_id,
            self.agent_id,
            self.client.gateway_id,
            self.seq,
            int(time.time() * 1000),
            self.session_id,
        )
        event = kind(envelope=envelope, **fields)
        self.client.publish(event)
        self.events.append(event)
        return event

    def before_tool(
        self,
        tool_name: str,
        args: Any,
        tool_call_id: str | None = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost_usd: float | None = None,
    ) -> Verdict:
        """Publish the call and say whether it may run; raises :class:`RunAborted`. The
        usage arguments: the model turn that asked for the call (see :meth:`report_usage`)."""
        verdict = self.client.take_verdict(self.run_id, self.seq, tool_name, self.agent_id)
        args_json = json.dumps(args, ensure_ascii=False)
        if input_tokens is not None or output_tokens is not None or cost_usd is not None:
            self.report_usage(input_tokens, output_tokens, cost_usd)
        self.emit(
            ToolCall,
            tool_name=tool_name,
            args_json=args_json,
            tool_call_id=tool_call_id,
            **self._take_usage(),
        )
        if not verdict.allowed:
            self.after_tool(tool_name, args, result=LOOP_VETO_RESULT, tool_call_id=tool_call_id)
        return verdict

    def after_tool(
        self,
        tool_name: str,
        args: Any,
        result: Any = None,
        error: str | None = None,
        tool_call_id: str | None = None,
    ) -> None:
        self.emit(
            ToolResult,
            tool_name=tool_name,
            args_json=json.dumps(args, ensure_ascii=False),
            result_json=None if result is None else json.dumps(result, ensure_ascii=False),
            error=error,
            tool_call_id=tool_call_id,
        )

    def compaction(self, trigger: str = "context_overflow") -> None:
        self.emit(CompactionRetry, trigger=trigger)

    def end(
        self,
        status: str = "completed",
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost_usd: float | None = None,
    ) -> None:
        """Publish RunEnded, with the usage not sent yet (the run's last turn)."""
        if input_tokens is not None or output_tokens is not None or cost_usd is not None:
            self.report_usage(input_tokens, output_tokens, cost_usd)
        self.emit(RunEnded, status=status, **self._take_usage())
        self.client.flush()
