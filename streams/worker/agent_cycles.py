"""The Faust agent that guards loops between agents (issue 28, :mod:`streams.core.agent_cycles`).

Data flow::

    <prefix>.events ──guard_runs──► (send calls, re-keyed by chain id / gateway)
        ──► <prefix>.agent_sends ──guard_agent_cycles──► agent-cycles table (changelog)
                                                     └──► <prefix>.control (by run id)

The guarding agent forwards every agent-to-agent send call, its bytes unchanged, keyed by its
:func:`~streams.core.agent_cycles.cycle_key`, so one partition holds a cycle key's whole graph
(docs/design.md, "Loops between agents"). This agent hands each batch to
:func:`streams.service.agent_cycles.apply_sends`, stores the graphs it returns and finishes
the batch in one step of its own :class:`~streams.worker.checkpoint.Checkpoint` under the
guarding agent's barrier,
so the same guarantees hold: exactly once, a batch's graph writes (and, with transactional
control delivery, its decisions) go in its source partition's transaction, committed with its
offsets; the audit agent and the gateways read the decisions from the control topic, keyed by
run id, like every other decision.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import cached_property, partial
from typing import Any

import faust
from mode import CrashingSupervisor

from streams.core.config import LoopDetectionConfig
from streams.core.events import Decision
from streams.service.agent_cycles import CycleBatch, CycleTopics, apply_sends
from streams.service.records import BatchContext, Message
from streams.settings import Settings
from streams.worker.checkpoint import Checkpoint
from streams.worker.crash_exit import CrashExit
from streams.worker.ready_batches import take_ready

AGENT_NAME = "guard_agent_cycles"


def changelog_name(settings: Settings) -> str:
    return f"{settings.app_id}-agent-cycles-changelog"


class AgentCycles:
    """The agent-sends topic, the graphs table and the agent that applies one to the other."""

    def __init__(
        self,
        app: faust.App,
        settings: Settings,
        context: BatchContext,
        config_for: Callable[[str], LoopDetectionConfig],
        commit_barrier: Any,
        on_decisions: Callable[[list[Decision]], None] | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.context = context
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

    @cached_property
    def checkpoint(self) -> Checkpoint:
        """This agent's checkpoint, built on its first batch (Faust's producer and consumer
        exist by then): exactly once with immediate control delivery, decisions go outside
        the transaction, acknowledged before the batch's graph writes, acks and commit."""
        immediate: frozenset[str] = frozenset()
        if self.settings.control_delivery == "immediate":
            immediate = frozenset({self.settings.topics.control})
        return Checkpoint(self.app, self.commit_barrier, self.delivery_failed, immediate)

    async def guard_cycles(self, stream: faust.StreamT) -> None:
        """Apply forwarded sends in batches, each one checkpoint step: work, sends, acks and
        (exactly once) the commit, as the guarding agent's batches."""
        settings = self.settings
        async for batch in take_ready(stream, settings.batch_size, settings.batch_window):
            found: list[Decision] = []  # filled by the work, reported once acked
            messages = [event.message for event in batch]
            await self.checkpoint.run(
                partial(self.decide, messages, found), partial(self.acked, stream, batch, found)
            )

    async def decide(self, messages: list[Message], found: list[Decision]) -> CycleBatch:
        output = self.apply_batch(messages)
        found.extend(output.decisions)
        return output

    def apply_batch(self, messages: list[Message]) -> CycleBatch:
        """The batch decided (:func:`apply_sends`), its graphs stored in the table's memory
        (their changelog records are the checkpoint's to send)."""
        topics = CycleTopics(
            self.settings.topics.control,
            changelog_name(self.settings),
            deadletter=self.settings.topics.deadletter,  # a send it cannot apply (issue 40)
        )
        output = apply_sends(
            messages, self.graphs.get, self.config_for, self.context, topics, now=time.time()
        )
        for key, value in output.graph_writes.items():
            self.graphs.data[key] = value  # stored without Faust's own changelog write
        return output

    async def acked(self, stream: faust.StreamT, batch: list[Any], found: list[Decision]) -> None:
        """Ack a batch whose records are with the producer (its decisions acknowledged,
        with immediate control delivery), then report its decisions."""
        for event in batch:
            await stream.ack(event)
        if found and self.on_decisions is not None:
            self.on_decisions(found)

    def delivery_failed(self, exc: BaseException) -> None:
        """A decision or graph the producer gave up on stops the worker (its supervisor
        restarts it from the last commit), as the guarding agent's records do."""
        self.crashing = asyncio.ensure_future(self.app.crash(exc))
