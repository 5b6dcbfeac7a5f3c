"""A run's state as changelog bytes, its recent decisions packed once while they stay the same.

A run keeps the decisions of its last deciding events (:mod:`streams.core.recent_decisions`)
and writes them with every state write, but they change only when one of its events is decided
on. Packing them (a dict per decision, MessagePack rows, deflate with a preset dictionary) cost
a looping run about 50 µs a write (``python -m bench.batch_bench --profile 40``). The encoder
remembers each run's packed bytes with the very decision objects they came from and reuses
them while the run still holds those; the bytes written are those of
:func:`streams.state.state_format.encode`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from streams.core.run_persistence import run_as_dict
from streams.core.run_state import RunState
from streams.state import state_format

# Runs whose packed decisions are remembered (least recently written out first): a looping
# run's entry holds references to decisions its state holds anyway, plus ~100 bytes.
REMEMBERED_RUNS = 4096


def recent_marker(state: RunState) -> tuple[Any, ...]:
    """What a run's packed recent decisions depend on: its ids (the rows leave them out) and
    each kept event's seq and decisions (frozen objects, compared by identity first)."""
    return (
        state.run_id,
        state.agent_id,
        state.gateway_id,
        *[(seq, *decisions) for seq, decisions in state.recent],
    )


class StateEncoder:
    """:func:`state_format.encode`, remembering the packed recent decisions of the last
    ``max_runs`` runs written."""

    def __init__(self, max_runs: int = REMEMBERED_RUNS) -> None:
        self.max_runs = max(1, max_runs)
        self.packed: OrderedDict[str, tuple[tuple[Any, ...], bytes | None]] = OrderedDict()

    def encode(self, state: RunState) -> bytes:
        """The state's changelog bytes, which it keeps as its rollback point
        (:attr:`RunState.written`)."""
        state.written = payload = self.pack(state)
        return payload

    def pack(self, state: RunState) -> bytes:
        if not state.recent:  # nothing to pack, nothing to remember
            return state_format.encode(state)
        marker = recent_marker(state)
        entry = self.packed.get(state.run_id)
        if entry is not None and entry[0] == marker:
            self.packed.move_to_end(state.run_id)
            payload = state_format.encode_with_recent(run_as_dict(state, []), entry[1])
            return state_format.encode(state) if payload is None else payload
        data = state.to_dict()
        recent = state_format.packed_recent(data)
        if isinstance(recent, bool):  # rows cannot hold them: the JSON fallback
            return state_format.encode(state)
        payload = state_format.encode_with_recent(data, recent)
        if payload is None:  # nor the rest of the binary form
            return state_format.encode(state)
        self.packed[state.run_id] = (marker, recent)
        self.packed.move_to_end(state.run_id)
        if len(self.packed) > self.max_runs:
            self.packed.popitem(last=False)
        return payload
