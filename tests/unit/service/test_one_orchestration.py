"""One orchestration of the detector core: random event streams through both entry points,
:class:`LoopGuard` event by event (replay, backtest, benchmarks) and :func:`process_batch`
over the worker's :class:`EventProcessor` in random batches, give the same decisions, byte for
byte (their Avro encoding, decision ids included), and the same run states.

The streams mix runs of one agent and of sessions (session scope: a session's next run seeds
from its previous one), loops and progress, failures, compactions, run ends, events delivered
out of order and delivered twice."""

from __future__ import annotations

from dataclasses import dataclass

from core_helpers import SMALL_LIMITS, Run, fleet, text_result
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.engine import LoopGuard
from streams.core.events import AgentEvent, partition_key
from streams.core.run_state import RunState
from streams.service.batch import BatchTopics, process_batch
from streams.service.processor import EventProcessor
from streams.service.records import BatchContext
from streams.state.state_format import encode as encode_state
from streams.wire.avro import encode_decision, encode_event
from streams.wire.schema_registry import default_registry

TOPICS = BatchTopics(events="lg.events", control="lg.control", deadletter="lg.dl", changelog="cl")
CONFIG = {**SMALL_LIMITS, "scope": "session"}
TOOLS = ("read", "exec", "write")


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def partition_for(topic: str, key: bytes | None) -> int:
    return sum(key or b"") % 3


@st.composite
def streams_of_events(draw: st.DrawFn) -> list[AgentEvent]:
    """Events of a few runs (some sharing a session), interleaved, some late or repeated."""
    runs = []
    for n in range(draw(st.integers(1, 4))):
        session = draw(st.sampled_from([None, "s-1", "s-2"]))
        run = Run(run_id=f"run-{n}", agent_id=f"agent-{n % 2}", session_id=session)
        events = [run.make_start(draw(st.sampled_from([None, "user", "heartbeat"])))]
        for _ in range(draw(st.integers(0, 14))):
            tool = draw(st.sampled_from(TOOLS))
            args = {"path": draw(st.sampled_from("ab"))}
            events.append(run.make_call(tool, args))
            if draw(st.integers(0, 5)) == 0:
                events.append(run.make_result(tool, args, error="ENOENT: no such file"))
            else:
                output = text_result(draw(st.sampled_from(["same", "same", "new"])))
                events.append(run.make_result(tool, args, output))
            if draw(st.integers(0, 12)) == 0:
                events.append(run.make_compaction())
        if draw(st.booleans()):
            events.append(run.make_end())
        runs.append(events)
    order = draw(st.permutations([i for i, events in enumerate(runs) for _ in events]))
    cursors = [0] * len(runs)
    delivered = []
    for i in order:  # runs interleaved, each run's events in its own order
        delivered.append(runs[i][cursors[i]])
        cursors[i] += 1
    for _ in range(draw(st.integers(0, 3))):  # a neighbour swap: an event arrives late
        at = draw(st.integers(0, max(0, len(delivered) - 2)))
        delivered[at : at + 2] = delivered[at : at + 2][::-1]
    for _ in range(draw(st.integers(0, 3))):  # redelivered
        delivered.append(delivered[draw(st.integers(0, len(delivered) - 1))])
    return delivered


def through_the_worker(events: list[AgentEvent], cuts: list[int]) -> tuple[list, dict]:
    table: dict[bytes, RunState] = {}
    sessions: dict[bytes, bytes] = {}
    processor = EventProcessor(
        table.get, fleet(CONFIG).for_agent, sessions.get, republish_duplicates=False
    )
    context = BatchContext(default_registry(), partition_for, 1 << 20)
    messages = [
        Message(TOPICS.events, 0, n, partition_key(e.envelope).encode(), encode_event(e))
        for n, e in enumerate(events)
    ]
    decisions = []
    bounds = sorted({0, *cuts, len(messages)})
    for start, end in zip(bounds, bounds[1:], strict=False):
        out = process_batch(messages[start:end], processor, context, TOPICS, now=0.0)
        assert out.dead_letters == [] and out.rekeys == []
        table.update({write.key: write.state for write in out.state_writes})
        sessions.update(out.sessions)
        decisions += out.decisions
    return decisions, {key.decode(): state for key, state in table.items()}


@settings(max_examples=120, deadline=None)
@given(streams_of_events(), st.lists(st.integers(0, 120), max_size=8))
def test_the_worker_and_the_loop_guard_decide_alike_byte_for_byte(
    events: list[AgentEvent], cuts: list[int]
) -> None:
    guard = LoopGuard(fleet(CONFIG))
    expected = [d for event in events for d in guard.process(event)]
    decided, states = through_the_worker(events, cuts)
    assert [encode_decision(d) for d in decided] == [encode_decision(d) for d in expected]
    assert {run: encode_state(s) for run, s in states.items()} == {
        run: encode_state(s) for run, s in guard.runs.items()
    }


def test_the_streams_reach_every_kind_of_decision() -> None:
    """The property above is not vacuous: such streams warn, block and abort."""
    run = Run(LoopGuard(fleet(CONFIG)))
    run.start()
    for _ in range(8):
        run.call("read", {"path": "a"})
        run.result("read", {"path": "a"}, text_result("same"))
    assert {d.action.value for d in run.decisions} >= {"warn", "block", "abort"}
