"""Loops between agents per batch (issue 28, :mod:`streams.core.agent_cycles`): forwarded send
calls in; each graph's new state and the decisions' records out. No Faust, no I/O.

The guarding agent forwards every agent-to-agent send call, its bytes unchanged, to the
agent-sends topic keyed by its :func:`~streams.core.agent_cycles.cycle_key`, so one partition
holds a key's whole graph. :func:`apply_sends` applies a batch of them: each decision goes to
the control topic keyed by run id, each touched graph once to its changelog on the partition
its sends came from; every record names that partition as its source, whose offsets it is
committed with. The worker's adapter (:mod:`streams.worker.agent_cycles`) stores the graphs
in its table and sends the records through its checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from streams.core.agent_cycles import ConfigFor, CycleGraph, apply_send, cycle_key
from streams.core.events import Decision
from streams.service.dead_letter_records import failure_text, send_dead_letter
from streams.service.records import BatchContext, Message, OutRecord, Produced, TopicPartition
from streams.wire.avro import encode_decision

log = logging.getLogger("loopguard.worker")


@dataclass(frozen=True)
class CycleTopics:
    """Where a batch of sends' records go."""

    control: str
    changelog: str  # the graphs table's
    deadletter: str = ""  # where a send that cannot be applied goes ("": logged, skipped)


@dataclass
class CycleBatch(Produced):
    """What one batch of forwarded sends produced: its records and offsets, the decisions
    found, and each touched graph's bytes to store (the changelog records carry the same)."""

    decisions: list[Decision] = field(default_factory=list)
    graph_writes: dict[bytes, bytes] = field(default_factory=dict)


def apply_sends(
    messages: Sequence[Message],
    load_graph: Callable[[bytes], bytes | None],
    config_for: ConfigFor,
    context: BatchContext,
    topics: CycleTopics,
    *,
    now: float = 0.0,
) -> CycleBatch:
    """Apply a batch's sends to their graphs (``load_graph``: a graph's stored bytes, None
    when it has none) and return the records to produce: each decision on the control topic
    by run id, then each touched graph once on its source partition's changelog. A send that
    cannot be applied, whatever the exception, is dead-lettered with its error (issue 40;
    ``now``: wall-clock seconds, its time) and the batch goes on."""
    touched: dict[bytes, tuple[CycleGraph, TopicPartition]] = {}
    out = CycleBatch()
    control = topics.control
    for message in messages:
        source = out.consumed(message)
        try:
            event = context.decode(message.value or b"")
            key = message.key or cycle_key(event).encode()
            held = touched.get(key)
            graph = held[0] if held else CycleGraph.decode(load_graph(key))
            decisions = apply_send(graph, event, config_for)
            encoded = [encode_decision(decision) for decision in decisions]
        except Exception as exc:  # noqa: BLE001 - one send must never stop the agent
            error = f"agent cycles: cannot apply a send: {failure_text(exc)}"
            if topics.deadletter:
                send_dead_letter(out, message, error, topics.deadletter, context.partition_for,
                                 context.max_message_bytes, now)  # fmt: skip
            else:
                log.warning("%s", error)
            continue
        touched[key] = (graph, source)
        for decision, value in zip(decisions, encoded, strict=True):
            out.decisions.append(decision)
            run_key = decision.run_id.encode()
            partition = context.partition_for(control, run_key)
            headers = context.sign(decision.gateway_id, value)  # issue 40
            out.add(OutRecord(control, run_key, value, partition, source, headers=headers))
    for key, (graph, source) in touched.items():
        value = out.graph_writes[key] = graph.encode()
        out.add(OutRecord(topics.changelog, key, value, source[1], source))
    return out
