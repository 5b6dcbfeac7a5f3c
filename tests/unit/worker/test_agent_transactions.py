"""The guarding agent sends each event's records in its source partition's transaction.

A session run's events are keyed by the session id (partition 2 here), its decisions and
watermarks by the run id (partition 5 here). Exactly once, Faust commits a partition's
transaction only with that partition's offsets, so they must go in partition 2's. The agent
runs for real (decoding, the processor, the tables' writes, its checkpoint); Faust's producer
is a stand-in recording which transaction each record joined. End to end:
tests/integration/test_sessions.py on Kafka with LOOPGUARD_PROCESSING_GUARANTEE=exactly_once.
"""

from __future__ import annotations

import asyncio
from functools import partial
from types import SimpleNamespace
from typing import Any

from core_helpers import Run, fleet, text_result
from faust.types import TP
from mode import Signal

from streams.core.events import AgentEvent
from streams.observability.metrics import WorkerMetrics
from streams.service.config_book import ConfigBook
from streams.service.processor import EventProcessor
from streams.settings import Settings
from streams.state.expiry import RunExpiry
from streams.wire.avro import decode_control, encode_event
from streams.wire.schema_registry import default_registry
from streams.worker import agents as agents_module
from streams.worker.agents import WorkerAgents

PARTITIONS = {b"sess-1": 2, b"run-b": 5, b"gateway:gw-1": 3}  # as the cluster would hash them


class NoOverrides:
    version = 0

    def get(self, key: str) -> None:
        return None


class Batch(list):
    """aiokafka's BatchBuilder, without a size limit."""

    def append(self, *, key: bytes, value: bytes, timestamp: Any) -> bool:  # type: ignore[override]
        super().append(value)
        return True


class Transaction:
    """One aiokafka producer: a partition's transactional one (the plain one: tid None)."""

    def __init__(self, tid: str | None, log: list[Any], sent: list[Any]) -> None:
        self.tid, self.log, self.sent = tid, log, sent

    def create_batch(self) -> Batch:
        return Batch()

    async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> Any:
        self.sent.extend((topic, partition, self.tid, value) for value in batch)
        delivered = asyncio.get_running_loop().create_future()
        delivered.set_result(None)
        return delivered

    async def commit_transaction(self) -> None:
        self.log.append(("commit", self.tid))

    async def begin_transaction(self) -> None:
        self.log.append(("begin", self.tid))


class Producer:
    """Faust's aiokafka Producer: one transactional producer per owned partition."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, str | None, Any]] = []
        self.log: list[Any] = []
        owned = [f"lg-0-{n}" for n in range(8)]
        self._transaction_producers = {tid: Transaction(tid, self.log, self.sent) for tid in owned}
        self._trn_locks = {tid: asyncio.Lock() for tid in owned}
        self.buffer = SimpleNamespace(pending=asyncio.Queue(), should_stop=False)

    def _ensure_producer(self) -> Transaction:
        return Transaction(None, self.log, self.sent)

    def key_partition(self, topic: str, key: bytes) -> TP:
        return TP(topic, PARTITIONS[key])


class Topic:
    """A Faust topic, by name: the checkpoint sends the records straight to the producer."""

    def __init__(self, name: str) -> None:
        self.name = name

    def get_topic_name(self) -> str:
        return self.name


class RunsTable(dict):
    """The runs table: writes go to the events' partition (streams.worker.tables)."""

    def __init__(self, producer: Producer, changelog_topic: Topic) -> None:
        super().__init__()
        self.producer = producer
        self.data = self  # the agent stores a state here and sends its changelog write itself
        self._key_partition: dict[bytes, int] = {}  # as Faust's memory store notes them
        self.changelog_topic = changelog_topic

    def changelog_tp(self, key: bytes, state: Any) -> Any:
        return self.producer.key_partition("lg-runs-changelog", state.session_id.encode() or key)


def worker(block: dict, delivery: str = "transactional") -> tuple[WorkerAgents, Producer]:
    """The guarding agent over stand-ins; ``delivery``: LOOPGUARD_CONTROL_DELIVERY."""
    producer = Producer()
    app = SimpleNamespace(
        conf=SimpleNamespace(id="lg"),
        assignor=SimpleNamespace(
            group_for_topic=lambda topic: 0,
            assigned_actives=lambda: {TP("lg-runs-changelog", p) for p in PARTITIONS.values()},
        ),
        producer=producer,
        in_transaction=True,
        consumer=BatchCommitter([], asyncio.Lock()),
        on_partitions_revoked=Signal(),
    )
    runs, sessions = RunsTable(producer, Topic("lg-runs-changelog")), {}
    configs = ConfigBook(fleet(block), NoOverrides())
    parts = SimpleNamespace(
        settings=Settings.for_profile("kafka", control_delivery=delivery),
        app=app,
        control_topic=Topic("lg.control"),
        deadletter_topic=Topic("lg.deadletter"),
        runs=runs,
        sessions=sessions,
        processor=EventProcessor(
            runs.get, configs.for_agent, sessions.get, republish_duplicates=False
        ),
        registry=default_registry(),
        keys=None,  # unsigned (issue 40)
        metrics=WorkerMetrics(),
        expiry=RunExpiry(idle_ttl=60.0, ended_grace=0.0),
        commit_barrier=asyncio.Lock(),
    )
    return WorkerAgents(parts), producer  # type: ignore[arg-type]


def session_run() -> list[AgentEvent]:
    run = Run(run_id="run-b", session_id="sess-1", time_step=10)
    events = [run.make_start("user")]
    for i in range(7):
        events.append(run.make_call("read", {"path": "a.txt"}, f"c{i}"))
        events.append(run.make_result("read", {"path": "a.txt"}, text_result("same"), f"c{i}"))
    events.append(run.make_end())
    return events


def batch(events: list[AgentEvent]) -> list[SimpleNamespace]:
    return [
        SimpleNamespace(
            message=SimpleNamespace(
                topic="lg.events",
                partition=2,
                offset=n,
                key=b"sess-1",
                value=encode_event(e),
                timestamp=e.envelope.event_time / 1000,  # as the gateway's producer stamped it
            )
        )
        for n, e in enumerate(events)
    ]


BLOCK = {"enabled": True, "warningThreshold": 5, "criticalThreshold": 8, "scope": "run"}


async def guard(agents: WorkerAgents, events: list[SimpleNamespace]) -> None:
    """One batch through the agent's checkpoint, as guard_runs takes it (acks aside)."""

    async def ack() -> None:
        return None

    messages = [event.message for event in events]
    await agents.checkpoint.run(partial(agents.guard_batch, messages), ack)


def test_a_session_runs_decisions_and_watermark_go_in_its_events_partitions_transaction() -> None:
    agents, producer = worker(BLOCK)
    asyncio.run(guard(agents, batch(session_run())))
    control = [
        (p, tid, type(decode_control(v)).__name__)
        for topic, p, tid, v in producer.sent
        if topic == "lg.control"
    ]
    kinds = [kind for _, _, kind in control]
    assert kinds.count("Decision") >= 1 and kinds[-1] == "RunWatermarks"  # it did decide
    # Keyed by run id, so written to partition 5, but committed with partition 2's offsets.
    assert {(p, tid) for p, tid, _ in control} == {(5, "lg-0-2")}
    assert set(agents.parts.runs) == {b"run-b"}
    # The state's changelog write: its events' partition (2), in that partition's transaction.
    changelog = [(p, tid) for topic, p, tid, _ in producer.sent if topic == "lg-runs-changelog"]
    assert changelog == [(2, "lg-0-2")]


def test_expired_state_is_committed_in_its_partitions_transaction_at_once() -> None:
    agents, producer = worker(BLOCK)

    async def scenario() -> None:
        await guard(agents, batch(session_run()))  # the run ended: it may go
        agents.parts.expiry.last_touched[b"run-b"] -= 1.0
        await agents.expire_runs()

    asyncio.run(scenario())
    assert agents.parts.runs == {} and agents.parts.sessions == {}
    # No event will carry partition 2's offsets: the deletion's transaction is committed now.
    assert producer.log == [("commit", "lg-0-2"), ("begin", "lg-0-2")]


def test_a_written_state_is_noted_with_its_partition_until_it_expires() -> None:
    """So a recovery drops it once its partition leaves this worker (Faust's memory store
    notes only what it reads from a changelog): the events' partition (2), not the run id's."""
    agents, _ = worker(BLOCK)

    async def scenario() -> None:
        await guard(agents, batch(session_run()))
        assert agents.parts.runs._key_partition == {b"run-b": 2}
        agents.parts.expiry.last_touched[b"run-b"] -= 1.0  # the run ended: it may go
        await agents.expire_runs()

    asyncio.run(scenario())
    assert agents.parts.runs == {} and agents.parts.runs._key_partition == {}


def test_the_expiry_sweep_leaves_a_standby_copy_to_its_owner() -> None:
    agents, _ = worker(BLOCK)
    agents.parts.app.assignor.assigned_actives = set  # the run's partition is a standby here

    async def scenario() -> None:
        await guard(agents, batch(session_run()))  # the run ended: its owner may drop it
        agents.parts.expiry.last_touched[b"run-b"] -= 1.0
        await agents.expire_runs()

    asyncio.run(scenario())
    assert b"run-b" in agents.parts.runs  # no tombstone from a copy that may be behind


class AckingStream:
    """The agent's stream as guard_runs uses it: acks recorded with what was committed."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    async def ack(self, event: Any) -> bool:
        self.log.append(("ack", event.message.offset))
        return True


class BatchCommitter:
    """Faust's consumer as commit_batch sees it: records the acks each commit finds."""

    def __init__(self, log: list[Any], barrier: asyncio.Lock) -> None:
        self.log, self.barrier = log, barrier

    async def maybe_wait_for_commit_to_finish(self) -> bool:
        return False

    async def commit(self) -> bool:
        acked = [entry[1] for entry in self.log if entry[0] == "ack"]
        self.log.append(("commit", acked, "between batches" if not self.barrier.locked() else "in"))
        return True


def guarded(monkeypatch, in_transaction: bool) -> list[Any]:
    """Run guard_runs over two batches of the session run; what was acked and committed."""
    agents, _ = worker(BLOCK, "transactional")
    parts, log = agents.parts, []
    parts.app.in_transaction = in_transaction
    parts.app.consumer = BatchCommitter(log, parts.commit_barrier)
    events = batch(session_run())

    async def take_ready(stream: Any, max_: int, within: float):
        yield events[:3]
        yield events[3:5]

    monkeypatch.setattr(agents_module, "take_ready", take_ready)
    asyncio.run(agents.guard_runs(AckingStream(log)))  # type: ignore[arg-type]
    return log


def test_exactly_once_each_batch_is_acked_then_committed_between_batches(monkeypatch) -> None:
    assert guarded(monkeypatch, in_transaction=True) == [
        ("ack", 0),
        ("ack", 1),
        ("ack", 2),
        ("commit", [0, 1, 2], "between batches"),  # the batch's offsets ride with its records
        ("ack", 3),
        ("ack", 4),
        ("commit", [0, 1, 2, 3, 4], "between batches"),
    ]


def test_at_least_once_batches_are_acked_and_left_to_fausts_commit_timer(monkeypatch) -> None:
    assert guarded(monkeypatch, in_transaction=False) == [("ack", n) for n in range(5)]


# -- "immediate" control delivery (LOOPGUARD_CONTROL_DELIVERY, the kafka profile's default) --


def test_immediate_delivery_sends_decisions_outside_the_transaction_before_the_state() -> None:
    agents, producer = worker(BLOCK, "immediate")

    async def scenario() -> None:
        await guard(agents, batch(session_run()))
        await agents.checkpoint.settling.settled()

    asyncio.run(scenario())
    control = [(p, tid) for topic, p, tid, _ in producer.sent if topic == "lg.control"]
    assert control and set(control) == {(5, None)}  # the plain producer: visible once acked
    topics = [topic for topic, _, _, _ in producer.sent]
    changelog = [(p, tid) for topic, p, tid, _ in producer.sent if topic == "lg-runs-changelog"]
    assert changelog == [(2, "lg-0-2")]  # the state still rides with its events' offsets
    assert topics.index("lg-runs-changelog") > max(
        i for i, topic in enumerate(topics) if topic == "lg.control"
    )


def test_each_events_age_when_taken_in_is_observed() -> None:
    agents, _ = worker(BLOCK, "immediate")
    events = session_run()

    async def scenario() -> None:
        await guard(agents, batch(events))
        await agents.checkpoint.settling.settled()

    asyncio.run(scenario())
    registry = agents.parts.metrics.registry
    assert registry.get_sample_value("loopguard_event_age_seconds_count") == len(events)
    # the events' timestamps are the Run helper's (long past), so each is old when taken in
    assert registry.get_sample_value("loopguard_event_age_seconds_bucket", {"le": "60.0"}) == 0


def test_a_batch_is_one_decided_observation_of_its_first_events_age() -> None:
    agents, _ = worker(BLOCK, "immediate")
    events = session_run()

    async def scenario() -> None:
        await guard(agents, batch(events))
        await agents.checkpoint.settling.settled()

    asyncio.run(scenario())
    registry = agents.parts.metrics.registry
    decided = {"stage": "decided"}
    assert registry.get_sample_value("loopguard_event_stage_age_seconds_count", decided) == 1
    # the Run helper's timestamps are long past: the first event was old when decided
    age = registry.get_sample_value("loopguard_event_stage_age_seconds_sum", decided)
    assert age > 60


class HeldCommits(BatchCommitter):
    """A commit that takes as long as the test says: the first one waits for ``release``."""

    def __init__(self, log: list[Any], barrier: asyncio.Lock) -> None:
        super().__init__(log, barrier)
        self.release = asyncio.Event()

    async def commit(self) -> bool:
        await self.release.wait()
        return await super().commit()


def test_immediate_delivery_decides_the_next_batch_while_a_commit_is_under_way(
    monkeypatch,
) -> None:
    agents, producer = worker(BLOCK, "immediate")
    parts, log = agents.parts, []
    committer = parts.app.consumer = HeldCommits(log, parts.commit_barrier)
    events = batch(session_run())
    sent_during_commit: list[int] = []

    async def take_ready(stream: Any, max_: int, within: float):
        yield events[:3]
        await asyncio.sleep(0)  # the first batch's settling reaches its commit and waits
        yield events[3:]
        await asyncio.sleep(0)
        sent_during_commit.append(sum(1 for topic, *_ in producer.sent if topic == "lg.control"))
        committer.release.set()

    async def scenario() -> None:
        monkeypatch.setattr(agents_module, "take_ready", take_ready)
        # An agent that waited for the commit would never take the second batch: the wait
        # for it ends the test (a hang bound, not a timing assertion).
        await asyncio.wait_for(agents.guard_runs(AckingStream(log)), 10)  # type: ignore[arg-type]
        await agents.checkpoint.settling.settled()

    asyncio.run(scenario())
    decided = [v for topic, _, _, v in producer.sent if topic == "lg.control"]
    assert any(type(decode_control(v)).__name__ == "Decision" for v in decided)
    # The second batch's decisions and watermark went out before the first commit ended.
    assert sent_during_commit == [len(decided)]
    # Each batch's events acked after its records, in order; one commit covers both batches
    # (the second queued behind the first, which was then no longer the last).
    assert [entry for entry in log if entry[0] == "ack"] == [("ack", n) for n in range(16)]
    commits = [entry for entry in log if entry[0] == "commit"]
    assert commits[-1][1] == list(range(16))


def test_immediate_delivery_never_acks_a_batch_whose_decision_was_not_delivered() -> None:
    agents, producer = worker(BLOCK, "immediate")
    failures: list[BaseException] = []
    agents.checkpoint.settling.on_failure = failures.append
    acked: list[int] = []

    class Refused(Transaction):
        async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> Any:
            delivered = asyncio.get_running_loop().create_future()
            delivered.set_exception(RuntimeError("NotEnoughReplicas"))
            return delivered

    producer._ensure_producer = lambda: Refused(None, producer.log, producer.sent)  # type: ignore[method-assign]

    async def scenario() -> None:
        async def ack() -> None:
            acked.append(1)

        messages = [event.message for event in batch(session_run())]
        await agents.checkpoint.run(partial(agents.guard_batch, messages), ack)
        await agents.checkpoint.settling.settled()

    asyncio.run(scenario())
    assert acked == [] and producer.log == []  # not acked, nothing committed
    assert [str(exc) for exc in failures] == ["NotEnoughReplicas"]
    assert not [p for topic, p, *_ in producer.sent if topic == "lg-runs-changelog"]


def test_immediate_delivery_commits_expired_state_behind_the_batches_still_settling() -> None:
    agents, producer = worker(BLOCK, "immediate")

    async def scenario() -> None:
        await guard(agents, batch(session_run()))  # the run ended: it may go
        agents.parts.expiry.last_touched[b"run-b"] -= 1.0
        await agents.expire_runs()
        await agents.checkpoint.settling.settled()

    asyncio.run(scenario())
    assert agents.parts.runs == {} and agents.parts.sessions == {}
    tombstones = [
        (p, tid) for topic, p, tid, v in producer.sent if topic == "lg-runs-changelog" and v is None
    ]
    assert tombstones == [(2, "lg-0-2")]
    assert producer.log[-2:] == [("commit", "lg-0-2"), ("begin", "lg-0-2")]


def test_immediate_delivery_puts_a_forwarded_send_on_its_topic_before_the_watermark() -> None:
    agents, producer = worker(BLOCK, "immediate")
    forwards = agents.batch_topics.agent_sends
    unacknowledged: list[asyncio.Future] = []

    class SlowForwards(Transaction):
        """The plain producer; a forwarded send's delivery waits for the test."""

        async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> Any:
            delivered = await super().send_batch(batch, topic, partition=partition)
            if topic != forwards:
                return delivered
            unacknowledged.append(asyncio.get_running_loop().create_future())
            return unacknowledged[-1]

    plain = SlowForwards(None, producer.log, producer.sent)
    producer._ensure_producer = lambda: plain  # type: ignore[method-assign]
    run = Run(run_id="run-b", session_id="sess-1", time_step=10)
    send = {"sessionKey": "agent:beta:main", "message": "any news?"}
    events = [
        run.make_start("user"),
        run.make_call("sessions_send", send, "c1"),
        run.make_result("sessions_send", send, text_result("noted"), "c1"),
    ]

    def control_sent() -> int:
        return sum(1 for topic, *_ in producer.sent if topic == "lg.control")

    async def scenario() -> tuple[int, int]:
        guarding = asyncio.ensure_future(guard(agents, batch(events)))
        for _ in range(20):
            await asyncio.sleep(0)
        before = control_sent()  # the forward is sent, not yet acknowledged
        for delivery in unacknowledged:
            delivery.set_result(None)
        await guarding
        await agents.checkpoint.settling.settled()
        return before, control_sent()

    before, after = asyncio.run(scenario())
    assert unacknowledged, "the send was forwarded outside the transaction"
    # The watermark that lets the gateway make the next agent's send waits for the forward.
    assert (before, after > 0) == (0, True)
