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

In time: after each batch the worker publishes its runs' watermarks (a
:class:`~streams.wire.avro.RunWatermarks` record per control partition) behind their
decisions, so ``before_tool`` first waits (at most ``wait_budget_ms``) until the worker
has processed everything this run published. A guard that does not answer in time is
counted in ``wait_timeouts`` and logged; ``fail_mode="open"`` lets the call run,
``"closed"`` refuses it.
The constructor is bounded too: within ``connect_timeout_ms`` it reaches a broker (given as
``host:port`` or ``kafka://host:port``), finds the control topic, announces its schema and
learns the events topic's partitions (so the first ``before_tool`` waits for nothing else), or
raises :class:`GatewayConnectError` with one line saying which.
Every partition of the control topic is read without a consumer group, so a gateway starts
hearing decisions at once instead of waiting for a group join. It keeps what it hears of its
own runs (those it published for or asked about; the last ``ended_runs_kept`` once ended)
and hands every decision to ``on_decision``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from streams.core.events import AgentEvent, Decision, RunEnded, RunStarted, partition_key
from streams.core.operator_command import OperatorCommand
from streams.gateway.connect import BrokerAddressError, GatewayConnectError, parse_brokers
from streams.gateway.run import LOOP_VETO_RESULT, GatewayRun
from streams.gateway.verdicts import (
    ENDED_RUNS_KEPT,
    OBSERVED_EFFECT,
    TIMEOUT_LOG_INTERVAL,
    ControlState,
    RunAborted,
    Verdict,
    log_observed,
)
from streams.kafka.reader import TopicFollower
from streams.kafka.schema_topic import publish_schema
from streams.settings import Topics
from streams.wire.avro import RunWatermark, encode_event, event_schema_json
from streams.wire.operator_codec import encode_command
from streams.wire.schema_registry import default_registry
from streams.wire.signing import KeyRing, gateway_keys_from_env

# The run API and the verdict state live in run.py and verdicts.py; their names stay
# importable from here, where gateways have always imported them.
__all__ = [
    "CONNECT_TIMEOUT_MS",
    "LOOP_VETO_RESULT",
    "OBSERVED_EFFECT",
    "TIMEOUT_LOG_INTERVAL",
    "BrokerAddressError",
    "GatewayClient",
    "GatewayConnectError",
    "GatewayRun",
    "RunAborted",
    "Verdict",
    "log_observed",
]

CONNECT_TIMEOUT_MS = 10_000  # the constructor's budget: broker, control topic, schema, metadata


class GatewayClient:
    """A gateway's connection to loopguard: publishes its runs' events and follows the
    control topic into a :class:`ControlState` that answers each call's verdict."""

    # The Avro schema this client writes with; announced on the schemas topic at start.
    writer_schema_json = event_schema_json()

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        gateway_id: str,
        topics: Topics | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        wait_budget_ms: float = 50.0,
        fail_mode: str = "open",
        fetch_max_wait_ms: int = 20,
        on_watermark: Callable[[RunWatermark], None] | None = None,
        ended_runs_kept: int = ENDED_RUNS_KEPT,
        connect_timeout_ms: float = CONNECT_TIMEOUT_MS,
        signing_keys: KeyRing | Mapping[str, str] | str | None = None,
        **kafka_options: Any,
    ) -> None:
        servers = parse_brokers(bootstrap_servers)  # BrokerAddressError before any connection
        # issue 40: this gateway's own keys (default: LOOPGUARD_GATEWAY_KEY): its events go
        # out signed, and only control records a worker signed for it are obeyed.
        self.keys = gateway_keys_from_env() if signing_keys is None else KeyRing.of(signing_keys)
        self.control = ControlState(
            gateway_id,
            wait_budget_ms,
            fail_mode,
            on_decision,
            on_watermark,
            ended_runs_kept,
            keys=self.keys,
        )
        self.gateway_id = gateway_id
        self.topics = topics or Topics()
        self.brokers = servers
        budget_ms = max(int(connect_timeout_ms), 1)
        deadline = time.monotonic() + budget_ms / 1000
        # Each Kafka step gives up within the budget: by default kafka-python tries to
        # bootstrap for 30 s and waits 60 s for a topic's metadata, here and in a send alike.
        options = {"bootstrap_timeout_ms": budget_ms, **kafka_options}
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=servers,
                acks="all",
                linger_ms=0,
                **{"max_block_ms": budget_ms, **options},
            )
        except KafkaError as exc:
            raise GatewayConnectError(self._unreachable(exc, budget_ms)) from None
        # Only what is published from now on counts: follow the control topic from its end.
        self._follower = TopicFollower(
            servers,
            self.topics.control,
            self.control.on_control,
            from_end=True,
            poll_ms=100,
            thread_name="loopguard-control",
            # Apache Kafka answers a waiting fetch as soon as a decision arrives, so this only
            # paces idle fetches; tansu holds every fetch for the whole wait, so there it is
            # how late a decision may be seen: pass the tansu profile's (5 ms) there.
            fetch_max_wait_ms=fetch_max_wait_ms,
            isolation_level="read_committed",  # a worker's aborted transaction is no decision
            **options,
        )
        try:
            self._open(deadline, budget_ms)
        except BaseException:
            self._follower.stop()
            self._producer.close(timeout=0)
            raise
        self._follower.start()

    def _open(self, deadline: float, budget_ms: int) -> None:
        """By ``deadline``: the control topic assigned at its end, the writer schema announced
        and the events topic's partitions known (the first call's send then waits for no
        metadata); else :class:`GatewayConnectError`."""
        try:
            if not self._follower.open(wait=max(deadline - time.monotonic(), 0.0)):
                raise GatewayConnectError(
                    f"loopguard gateway: Kafka at {', '.join(self.brokers)} has no topic "
                    f"{self.topics.control!r} (waited {budget_ms / 1000:g} s); is a loopguard "
                    "worker running there with this topic prefix?"
                )
            publish_schema(
                self._producer,
                self.topics.schemas,
                default_registry(),
                self.writer_schema_json,
                timeout=max(deadline - time.monotonic(), 0.001),
            )
        except KafkaError as exc:
            raise GatewayConnectError(self._unreachable(exc, budget_ms)) from None
        try:
            self._producer.partitions_for(self.topics.events)
        except KafkaError:
            raise GatewayConnectError(
                f"loopguard gateway: Kafka at {', '.join(self.brokers)} did not give the "
                f"partitions of topic {self.topics.events!r} within {budget_ms / 1000:g} s"
            ) from None

    def _unreachable(self, exc: KafkaError, budget_ms: int) -> str:
        """The one line for a broker that did not answer (or refused) within the budget."""
        if isinstance(exc, KafkaTimeoutError | KafkaConnectionError):
            what = f"no Kafka broker answered within {budget_ms / 1000:g} s"
        else:
            what = str(exc).strip().split("\n", 1)[0][:300]
        return (
            f"loopguard gateway: {', '.join(self.brokers)}: {what}; check the address and that "
            "Kafka is running there"
        )

    @property
    def wait_timeouts(self) -> int:
        """Calls whose verdict the worker had not caught up with within the wait budget."""
        return self.control.wait_timeouts

    @property
    def other_runs(self) -> int:
        """Decisions and watermarks heard for runs this gateway does not keep."""
        return self.control.other_runs

    @property
    def forged(self) -> int:
        """Control records about this gateway's runs that no worker signed for it (with
        keys; issue 40): ignored."""
        return self.control.forged

    @property
    def duplicates(self) -> int:
        """Decisions delivered again (after a worker restart) and ignored."""
        return self.control.duplicates

    # -- publishing ------------------------------------------------------------------

    def publish(self, event: AgentEvent) -> None:
        # this gateway keeps the run's decisions and watermarks from now on (to its end)
        self.control.track(event.envelope.run_id, ended=isinstance(event, RunEnded))
        # keyed by the session id when the run has one: a session's runs share a partition
        key = partition_key(event.envelope).encode()
        value = encode_event(event)
        headers = None if self.keys is None else self.keys.headers(value)
        self._producer.send(self.topics.events, key=key, value=value, headers=headers)

    def publish_command(self, command: OperatorCommand) -> None:
        """An operator command of this gateway's (a held call's holdDefault, issue 43) on
        the events topic under its run's key, sent at once; signed with this gateway's key
        (a worker with keys applies it to this gateway's own runs only)."""
        key = partition_key(command.envelope).encode()
        value = encode_command(command)
        headers = None if self.keys is None else self.keys.headers(value)
        self._producer.send(self.topics.events, key=key, value=value, headers=headers)
        self._producer.flush()

    def watch(self, *run_ids: str) -> None:
        """Keep these runs' decisions and watermarks though this client does not publish
        them (tools and tests whose events go out through a producer of their own): call it
        before their events are sent, or their first records may pass unkept."""
        for run_id in run_ids:
            self.control.track(run_id)

    @property
    def control_reached(self) -> dict[int, int]:
        """Per control-topic partition, the offset of the next record this gateway reads."""
        return self._follower.reached

    def flush(self) -> None:
        self._producer.flush()

    def start_run(
        self,
        agent_id: str,
        run_id: str | None = None,
        session_id: str | None = None,
        trigger: str | None = None,
        chain_id: str | None = None,
    ) -> GatewayRun:
        """Start a run; ``session_id`` names the conversation it belongs to (``scope:
        "session"`` carries a loop's counts over to its next run), ``trigger`` what started
        it ("user", "heartbeat", "cron", "compaction", ...) and ``chain_id`` the cascade of
        messages across agents it is part of (every event of the run carries it; loops
        between agents are then judged per chain, not per gateway)."""
        run = GatewayRun(self, run_id or uuid.uuid4().hex, agent_id, session_id, chain_id)
        run.emit(RunStarted, trigger=trigger)
        return run

    # -- decisions (the control state's, see streams.gateway.verdicts) ----------------

    def decisions(self, run_id: str) -> list[Decision]:
        return self.control.decisions(run_id)

    def wait_for(
        self, run_id: str, predicate: Callable[[list[Decision]], Any], timeout: float = 10.0
    ) -> list[Decision]:
        """Block until ``predicate(decisions)`` holds for the run (tests, demo, tooling)."""
        return self.control.wait_for(run_id, predicate, timeout)

    def wait_processed(self, run_id: str, seq: int, timeout: float = 10.0) -> None:
        """Block until the worker has processed the run up to ``seq`` (its watermark)."""
        self.control.wait_processed(run_id, seq, timeout)

    def take_verdict(
        self, run_id: str, published_seq: int = 0, tool_name: str = "", agent_id: str = ""
    ) -> Verdict:
        """The run's verdict once the worker has processed up to ``published_seq``, or at the
        end of the wait budget (:meth:`ControlState.take_verdict`)."""
        return self.control.take_verdict(run_id, published_seq, tool_name, agent_id)

    def close(self) -> None:
        self._follower.stop()
        self._producer.flush()
        self._producer.close()
