"""The Faust agent that guards loops between agents (issue 28, :mod:`streams.core.agent_cycles`).

Data flow::

    <prefix>.events ──guard_runs──► (send calls, re-keyed by chain id / gateway)
        ──► <prefix>.agent_sends ──guard_agent_cycles──► agent-cycles table (changelog)
                                                     └──► <prefix>.control (by run id)

The guarding agent forwards every agent-to-agent send call, its bytes unchanged, keyed by its
:func:`~streams.core.agent_cycles.cycle_key`, so one partition holds a cycle key's whole graph
(docs/design.md, "Loops between agents"). This agent applies them in batches under the same
commit barrier as the guarding agent: exactly once, a batch's decisions and graph writes go in
its source partition's transaction, committed with its offsets; the audit agent and the
gateways read them from the control topic like every other decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import faust
from faust.types import TP
from mode import CrashingSupervisor

from streams.core.agent_cycles import CycleGraph, apply_send, cycle_key, is_send_call
from streams.core.config import LoopDetectionConfig
from streams.core.events import AgentEvent, Decision
from streams.settings import Settings
from streams.wire.avro import CodecError, decode_event, encode_decision
from streams.wire.schema_registry import SchemaRegistry
from streams.worker.crash_exit import CrashExit
from streams.worker.exactly_once import (
    commit_batch,
    drain_producer_buffer,
    source_transaction,
)
from streams.worker.ready_batches import take_ready

log = logging.getLogger("loopguard.worker")

AGENT_NAME = "guard_agent_cycles"


def changelog_name(settings: Settings) -> str:
    return f"{settings.app_id}-agent-cycles-changelog"


def forward_key(event: AgentEvent) -> bytes | None:
    """The agent-sends topic's key of ``event``; None for an event that is not a send call
    (nothing to forward)."""
    return cycle_key(event).encode() if is_send_call(event) else None


class AgentCycles:
    """The agent-sends topic, the graphs table and the agent that applies one to the other."""

    def __init__(
        self,
        app: faust.App,
        settings: Settings,
        registry: SchemaRegistry,
        config_for: Callable[[str], LoopDetectionConfig],
        commit_barrier: Any,
        on_decisions: Callable[[list[Decision]], None] | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.registry = registry
        self.config_for = config_for
        self.commit_barrier = commit_barrier
        self.on_decisions = on_decisions
        self.crashing: asyncio.Future | None = None  # held: a task nobody keeps can vanish
        raw = {
            "key_type": bytes,
            "value_type": bytes,
            "key_serializer": "raw",
            "value_serializer": "raw",
        }
        self.topic = app.topic(settings.topics.agent_sends, **raw)
        self.graphs = app.Table(
            "agent-cycles",
            default=None,
            key_type=bytes,
            value_type=bytes,
            use_partitioner=True,
            changelog_topic=app.topic(
                changelog_name(settings),
                partitions=settings.partitions,
                compacting=True,
                internal=True,
                allow_empty=True,
                **raw,
            ),
        )
        self.graphs.key_serializer = self.graphs.value_serializer = "raw"

    def register(self) -> None:
        exit_after = CrashExit(self.settings.crash_exit_seconds)
        self.app.agent(self.topic, name=AGENT_NAME, supervisor_strategy=CrashingSupervisor)(
            exit_after.guard(AGENT_NAME, self.guard_cycles)
        )

    async def guard_cycles(self, stream: faust.StreamT) -> None:
        """Apply forwarded sends in batches; commit each batch with its records."""
        app, settings = self.app, self.settings
        async for batch in take_ready(stream, settings.batch_size, settings.batch_window):
            async with self.commit_barrier:
                await self.apply_batch([event.message for event in batch])
                for event in batch:
                    await stream.ack(event)
            if app.in_transaction:
                await commit_batch(app.consumer)

    def check_delivery(self, delivery: asyncio.Future) -> None:
        """A decision or graph the producer gave up on stops the worker (its supervisor
        restarts it from the last commit), as the guarding agent's records do."""
        if delivery.cancelled() or delivery.exception() is None:
            return
        log.error("agent cycles: a record was not delivered: %r", delivery.exception())
        self.crashing = asyncio.ensure_future(self.app.crash(delivery.exception()))

    async def apply_batch(self, messages: list[Any]) -> None:
        """Each touched graph is written once (to its source partition's changelog), after
        the batch's decisions, all in the source's transaction."""
        app = self.app
        touched: dict[bytes, tuple[CycleGraph, TP]] = {}
        records: list[tuple[str, bytes, bytes, int | None, TP]] = []
        control = self.settings.topics.control
        found: list[Decision] = []
        for message in messages:
            source = TP(message.topic, message.partition)
            try:
                event = decode_event(
                    message.value, self.registry, max_size=self.settings.max_message_bytes
                )
            except CodecError as exc:  # the guarding agent decoded it: a bug, not input
                log.warning("agent cycles: skipping an undecodable send: %s", exc)
                continue
            key = message.key or cycle_key(event).encode()
            held = touched.get(key)
            graph = held[0] if held else CycleGraph.decode(self.graphs.get(key))
            touched[key] = (graph, source)
            for decision in apply_send(graph, event, self.config_for):
                found.append(decision)
                encoded = encode_decision(decision)
                records.append((control, decision.run_id.encode(), encoded, None, source))
        changelog = changelog_name(self.settings)
        for key, (graph, source) in touched.items():
            value = graph.encode()
            self.graphs.data[key] = value  # stored without Faust's own changelog write
            records.append((changelog, key, value, source.partition, source))
        await drain_producer_buffer(app.producer.buffer)
        send = app.producer.send
        # Exactly once with "immediate" control delivery, decisions go outside the
        # transaction and are acknowledged before the batch's acks (as the guarding agent's).
        immediate = app.in_transaction and self.settings.control_delivery == "immediate"
        acknowledged: list[Any] = []
        for topic, key, value, partition, source in records:
            outside = immediate and topic == control
            tid = None if outside else source_transaction(app, source)
            delivery = await send(topic, key, value, partition, None, None, transactional_id=tid)
            delivery.add_done_callback(self.check_delivery)
            if outside:
                acknowledged.append(delivery)
        if acknowledged:
            await asyncio.gather(*acknowledged)
        if found and self.on_decisions is not None:
            self.on_decisions(found)
