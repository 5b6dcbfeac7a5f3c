"""The agent-cycles agent finishes each batch through its own checkpoint, as the guarding agent.

Three agents send the same message round a triangle (issue 28); the sends reach the agent from
one agent-sends partition (3 here), their decisions are keyed by run id (partitions 6 and 1 by
murmur2 over 8). The agent runs for real (decoding, the graphs, its table writes, its
:class:`~streams.worker.checkpoint.Checkpoint`); Faust's producer and consumer are stand-ins
that record which transaction each record joined, the deliveries, acks and commits. End to
end: tests/integration/test_agent_cycles.py on both brokers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any

from aiokafka.partitioner import DefaultPartitioner
from faust.types import TP
from mode import Signal

from streams.core.agent_cycles import cycle_key
from streams.core.events import Action, Decision, Envelope, ToolCall
from streams.core.fleet import FleetConfig
from streams.service.records import BatchContext
from streams.settings import Settings
from streams.wire.avro import decode_control, encode_event
from streams.wire.schema_registry import default_registry
from streams.worker import agent_cycles as agent_cycles_module
from streams.worker.agent_cycles import AgentCycles, changelog_name

PARTITIONS = 8
SOURCE = 3  # the agent-sends partition the triangle's sends come from
CONFIG = {"agentCycles": {"warnAfter": 2, "blockAfter": 3, "windowSeconds": 60}}
TRIANGLE = (("alpha", "beta"), ("beta", "gamma"), ("gamma", "alpha"))


def murmur2(key: bytes) -> int:
    """The producer's partitioner (aiokafka's default, the gateways' and Java's)."""
    every = list(range(PARTITIONS))
    return DefaultPartitioner()(key, every, every)


class Batch(list):
    """aiokafka's BatchBuilder, without a size limit."""

    def append(self, *, key: bytes, value: bytes, timestamp: Any) -> bool:  # type: ignore[override]
        super().append((key, value))
        return True


class KafkaProducer:
    """One aiokafka producer: a partition's transactional one, or the plain one (tid None),
    whose deliveries the test may hold."""

    def __init__(self, tid: str | None, log: list[Any], held: list[asyncio.Future] | None) -> None:
        self.tid, self.log, self.held = tid, log, held

    def create_batch(self) -> Batch:
        return Batch()

    async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> asyncio.Future:
        for key, value in batch:
            self.log.append(("send", topic, partition, self.tid, key, value))
        delivered = asyncio.get_running_loop().create_future()
        if self.held is None:
            delivered.set_result(None)
        else:
            self.held.append(delivered)
        return delivered

    async def commit_transaction(self) -> None:
        self.log.append(("commit transaction", self.tid))

    async def begin_transaction(self) -> None:
        self.log.append(("begin transaction", self.tid))


class Producer:
    """Faust's aiokafka Producer: one transactional producer per partition, a plain one."""

    def __init__(self, log: list[Any], hold_plain: bool) -> None:
        tids = [f"lg-0-{n}" for n in range(PARTITIONS)]
        self._transaction_producers = {tid: KafkaProducer(tid, log, None) for tid in tids}
        self._trn_locks = {tid: asyncio.Lock() for tid in tids}
        self.held: list[asyncio.Future] = []
        self.plain = KafkaProducer(None, log, self.held if hold_plain else None)
        self.buffer = SimpleNamespace(pending=asyncio.Queue(), should_stop=False)

    def _ensure_producer(self) -> KafkaProducer:
        return self.plain

    def key_partition(self, topic: str, key: bytes) -> TP:
        return TP(topic, murmur2(key))


class Consumer:
    """Faust's consumer as the checkpoint's commit sees it: each commit logs the acks so far."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    async def maybe_wait_for_commit_to_finish(self) -> bool:
        return False

    async def commit(self) -> bool:
        self.log.append(("commit", [entry[1] for entry in self.log if entry[0] == "ack"]))
        return True


class Graphs(dict):
    """The agent-cycles table: the agent stores a graph in its memory (``data``)."""

    def __init__(self) -> None:
        super().__init__()
        self.data = self


class App:
    """The parts of Faust's app the agent uses."""

    def __init__(self, log: list[Any], in_transaction: bool, hold_plain: bool) -> None:
        self.conf = SimpleNamespace(id="lg")
        self.assignor = SimpleNamespace(group_for_topic=lambda topic: 0)
        self.producer = Producer(log, hold_plain)
        self.consumer = Consumer(log)
        self.in_transaction = in_transaction
        self.crashed: list[BaseException] = []
        self.on_partitions_revoked = Signal()

    def topic(self, name: str, **options: Any) -> str:
        return name

    def Table(self, name: str, **options: Any) -> Graphs:  # noqa: N802 (Faust's name)
        return Graphs()

    async def crash(self, exc: BaseException) -> None:
        self.crashed.append(exc)


class AckingStream:
    """The agent's stream: acks logged with the offsets."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    async def ack(self, event: Any) -> bool:
        self.log.append(("ack", event.message.offset))
        return True


def agent(
    log: list[Any],
    guarantee: str,
    delivery: str = "immediate",
    hold_plain: bool = False,
    config: dict[str, Any] = CONFIG,
) -> tuple[AgentCycles, list[list[Decision]]]:
    """The agent over stand-ins; the decisions it reported, batch by batch."""
    settings = Settings.for_profile(
        "kafka", processing_guarantee=guarantee, control_delivery=delivery
    )
    app = App(log, guarantee == "exactly_once", hold_plain)
    reported: list[list[Decision]] = []

    def on_decisions(decisions: list[Decision]) -> None:
        log.append(("reported", len(decisions)))
        reported.append(list(decisions))

    fleet = FleetConfig(config)

    def partition_for(topic: str, key: bytes | None) -> int:  # the worker's: the producer's
        return app.producer.key_partition(topic, key).partition

    context = BatchContext(default_registry(), partition_for, settings.max_message_bytes)
    cycles = AgentCycles(
        app,  # type: ignore[arg-type]
        settings,
        context,
        fleet.for_agent,
        asyncio.Lock(),
        on_decisions,
    )
    return cycles, reported


def triangle(rounds: int) -> list[SimpleNamespace]:
    """The forwarded sends of ``rounds`` rounds round the triangle, as the stream hands them."""
    seqs: dict[str, int] = {}
    events = []
    for n in range(rounds * len(TRIANGLE)):
        sender, target = TRIANGLE[n % len(TRIANGLE)]
        seqs[sender] = seqs.get(sender, 0) + 1
        env = Envelope(f"run-{sender}", sender, "gw-1", seqs[sender], 1_000_000 + 1000 * n)
        args = {"sessionKey": f"agent:{target}:main", "message": "any news?"}
        event = ToolCall(env, "sessions_send", json.dumps(args))
        message = SimpleNamespace(
            topic="loopguard.agent-sends",
            partition=SOURCE,
            offset=n,
            key=cycle_key(event).encode(),
            value=encode_event(event),
        )
        events.append(SimpleNamespace(message=message))
    return events


def guard(
    monkeypatch, cycles: AgentCycles, log: list[Any], *batches: list[Any]
) -> Coroutine[Any, Any, None]:
    """Run guard_cycles over ``batches`` (its stream's take_ready), without waiting for the
    batches to settle."""

    async def take_ready(stream: Any, max_: int, within: float):
        for batch in batches:
            yield batch

    monkeypatch.setattr(agent_cycles_module, "take_ready", take_ready)
    return cycles.guard_cycles(AckingStream(log))  # type: ignore[arg-type]


def sends(log: list[Any], topic: str) -> list[tuple[int, str | None, bytes]]:
    """(partition, transaction, key) of each record sent to ``topic``."""
    return [(e[2], e[3], e[4]) for e in log if e[0] == "send" and e[1] == topic]


def at(log: list[Any], entry: Any) -> int:
    return next(i for i, e in enumerate(log) if e[: len(entry)] == entry)


def test_apply_batch_returns_its_records_keyed_by_run_and_by_graph_without_a_producer() -> None:
    cycles, _ = agent([], "exactly_once")
    cycles.app.producer = None  # the batch's work sends nothing and asks no producer
    asked: list[tuple[str, bytes]] = []

    def partition_for(topic: str, key: bytes) -> int:
        asked.append((topic, key))
        return murmur2(key)

    cycles.context = BatchContext(default_registry(), partition_for, 1 << 20)
    out = cycles.apply_batch([event.message for event in triangle(2)])
    settings = cycles.settings
    assert {d.action for d in out.decisions} == {Action.WARN}
    assert {d.run_id for d in out.decisions} == {"run-alpha", "run-beta", "run-gamma"}
    control = settings.topics.control
    decisions = [r for (topic, _), chain in out.records.items() if topic == control for r in chain]
    # Keyed by run id on the run's partition (where its gateway reads it), from the sends'.
    assert [(r.key, r.partition) for r in decisions] == [
        (d.run_id.encode(), murmur2(d.run_id.encode())) for d in out.decisions
    ]
    assert {r.partition for r in decisions} == {6, 1} and SOURCE not in {6, 1}
    assert {r.source for r in decisions} == {("loopguard.agent-sends", SOURCE)}
    assert [decode_control(r.value) for r in decisions] == out.decisions
    # The graph: written once, to its source partition's changelog, and kept in the table.
    graph = out.records[(changelog_name(settings), SOURCE)]
    assert [(r.key, r.source) for r in graph] == [(b"gateway:gw-1", ("loopguard.agent-sends", 3))]
    assert cycles.graphs[b"gateway:gw-1"] == graph[0].value
    assert set(asked) == {(control, d.run_id.encode()) for d in out.decisions}


def test_under_compat_openclaw_the_agent_decides_nothing_unless_switched_on() -> None:
    """The reference has no rule across agents: compat switches it off in the worker too
    (the sends still reach it and change no graph); an explicit ``enabled`` brings it back."""
    compat, _ = agent([], "at_least_once", config={**CONFIG, "compat": "openclaw"})
    out = compat.apply_batch([event.message for event in triangle(3)])
    assert out.decisions == []
    on = {"compat": "openclaw", "agentCycles": {**CONFIG["agentCycles"], "enabled": True}}
    switched_on, _ = agent([], "at_least_once", config=on)
    out = switched_on.apply_batch([e.message for e in triangle(3)])
    assert {d.action for d in out.decisions} == {Action.WARN, Action.BLOCK}


def test_exactly_once_immediate_the_decision_is_out_before_the_graph_acks_and_commit(
    monkeypatch,
) -> None:
    log: list[Any] = []
    cycles, reported = agent(log, "exactly_once", "immediate", hold_plain=True)
    control, changelog = cycles.settings.topics.control, changelog_name(cycles.settings)

    async def scenario() -> list[Any]:
        await guard(monkeypatch, cycles, log, triangle(2))
        # The agent is done with the batch: its decisions are with the producer, outside the
        # transaction, and nothing else happened while they are unacknowledged.
        before = list(log)
        for delivery in cycles.app.producer.held:
            delivery.set_result(None)
        await cycles.checkpoint.settling.settled()
        return before

    before = asyncio.run(scenario())
    decided = sends(before, control)
    assert {(p, tid) for p, tid, _ in decided} == {(6, None), (1, None)}
    assert [e[0] for e in before] == ["send"] * len(decided)
    # Once acknowledged: the graph in the source partition's transaction, the acks, the
    # decisions reported, then the commit that carries the graph and the offsets.
    assert sends(log, changelog) == [(SOURCE, f"lg-0-{SOURCE}", b"gateway:gw-1")]
    assert at(log, ("send", changelog)) < at(log, ("ack", 0))
    assert [e[0] for e in log[at(log, ("ack", 0)) :]] == ["ack"] * 6 + ["reported", "commit"]
    assert log[-1] == ("commit", list(range(6)))
    assert [len(batch) for batch in reported] == [3] and not cycles.app.crashed


def test_exactly_once_transactional_decisions_and_graph_ride_in_the_sources_transaction(
    monkeypatch,
) -> None:
    log: list[Any] = []
    cycles, reported = agent(log, "exactly_once", "transactional")
    control, changelog = cycles.settings.topics.control, changelog_name(cycles.settings)
    asyncio.run(guard(monkeypatch, cycles, log, triangle(1), triangle(2)[3:]))
    # Partitioned by run id, committed with the sends' partition's offsets.
    assert {(p, tid) for p, tid, _ in sends(log, control)} == {(6, "lg-0-3"), (1, "lg-0-3")}
    assert [(p, tid) for p, tid, _ in sends(log, changelog)] == [(3, "lg-0-3")] * 2
    commits = [e for e in log if e[0] == "commit"]
    assert commits == [("commit", [0, 1, 2]), ("commit", list(range(6)))]  # batch by batch
    assert at(log, ("send", control)) < at(log, ("ack", 3)) < at(log, ("commit", list(range(6))))
    assert [len(batch) for batch in reported] == [3]


def test_at_least_once_records_go_out_and_the_events_are_acked(monkeypatch) -> None:
    log: list[Any] = []
    cycles, reported = agent(log, "at_least_once", "immediate")
    control, changelog = cycles.settings.topics.control, changelog_name(cycles.settings)
    asyncio.run(guard(monkeypatch, cycles, log, triangle(2)))
    assert {(p, tid) for p, tid, _ in sends(log, control)} == {(6, None), (1, None)}
    assert sends(log, changelog) == [(SOURCE, None, b"gateway:gw-1")]
    assert [e for e in log if e[0] == "ack"] == [("ack", n) for n in range(6)]
    assert not [e for e in log if e[0] == "commit"]  # Faust's timer commits at least once
    assert at(log, ("send",)) < at(log, ("ack", 0)) and log[-1] == ("reported", 3)
    assert [len(batch) for batch in reported] == [3]


def test_a_decision_the_producer_gave_up_on_crashes_the_worker_unacked(monkeypatch) -> None:
    log: list[Any] = []
    cycles, reported = agent(log, "exactly_once", "immediate", hold_plain=True)

    async def scenario() -> None:
        await guard(monkeypatch, cycles, log, triangle(2))
        for delivery in cycles.app.producer.held:
            delivery.set_exception(RuntimeError("NotEnoughReplicas"))
        await cycles.checkpoint.settling.settled()
        await asyncio.gather(*(c for c in [cycles.crashing] if c is not None))

    asyncio.run(scenario())
    assert [str(exc) for exc in cycles.app.crashed][:1] == ["NotEnoughReplicas"]
    assert not [e for e in log if e[0] in ("ack", "commit")] and reported == []
