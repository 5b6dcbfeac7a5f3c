"""Loop incidents per batch (streams.service.incidents), without Faust or a broker: signals
forwarded by signature, tallies and open incidents as table writes, incident records, and
closing on event time and on the wall clock once quiet (also for a worker just restarted)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from poison_records import deep_signal

from streams.core.events import Action, Decision, Envelope, ToolCall, ToolResult
from streams.core.incident_config import IncidentConfig
from streams.core.incidents import (
    CLOSED,
    CYCLE,
    ERROR,
    OPEN,
    Incident,
    IncidentBook,
    Signal,
    close,
)
from streams.service.incidents import (
    LATENESS_MS,
    IncidentClock,
    IncidentTopics,
    close_quiet,
    decision_signals,
    failure_signals,
    read_incidents,
    track_signals,
)
from streams.service.records import BatchContext, Produced
from streams.wire.avro import decode_dead_letter, encode_decision, encode_event
from streams.wire.incident_codec import (
    decode_incident,
    decode_signal,
    encode_incident,
    encode_signal,
)
from streams.wire.schema_registry import default_registry

CONFIG = IncidentConfig(enabled=True, window_seconds=60, min_runs=3, min_agents=2)
WINDOW_MS = 60_000
T0 = 1_700_000_040_000  # a window start
TOPICS = IncidentTopics(signals="lg.incident-signals", incidents="lg.incidents")
PARTITIONS = 4


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def partition_for(topic: str, key: bytes | None) -> int:
    return sum(key or b"") % PARTITIONS


CONTEXT = BatchContext(default_registry(), partition_for, 1 << 20)


def messages(topic: str, values: list[bytes]) -> list[Message]:
    return [Message(topic, 0, n, None, value) for n, value in enumerate(values)]


def signal(run: str, agent: str, at: int, detail: str = "upstream <n>") -> Signal:
    return Signal("web_fetch", ERROR, detail, run, agent, at)


class Tables:
    """The two tables as dicts, written as the adapter writes them."""

    def __init__(self) -> None:
        self.tallies: dict[bytes, bytes] = {}
        self.opened: dict[bytes, bytes] = {}

    def store(self, writes: dict[bytes, bytes | None], table: dict[bytes, bytes]) -> None:
        for key, value in writes.items():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value

    def track(self, signals: list[Signal], clock: IncidentClock, now_ms: int) -> list[Incident]:
        batch = messages(TOPICS.signals, [encode_signal(s) for s in signals])
        out = track_signals(
            batch, self.tallies.get, self.opened.get, CONFIG, clock, CONTEXT, TOPICS, now_ms
        )
        self.store(out.tally_writes, self.tallies)
        self.store(out.open_writes, self.opened)
        records = [decode_incident(r.value) for r in out.all_records()]
        assert sorted(records, key=repr) == sorted(out.published, key=repr)  # by partition
        return out.published

    def close(self, clock: IncidentClock, now_ms: int) -> list[Incident]:
        out = close_quiet(
            list(self.opened.items()),
            list(self.tallies.items()),
            CONFIG,
            clock,
            CONTEXT,
            TOPICS,
            now_ms,
        )
        self.store(out.tally_writes, self.tallies)
        self.store(out.open_writes, self.opened)
        return out.published


def opened(tables: Tables, clock: IncidentClock, at: int = T0 + 10) -> Incident:
    signals = [signal(r, a, at) for r, a in (("r1", "a1"), ("r2", "a1"), ("r3", "a2"))]
    (incident,) = tables.track(signals, clock, now_ms=at)
    assert incident.status == OPEN
    return incident


# -- forwarding ---------------------------------------------------------------------------


def test_failed_results_are_forwarded_keyed_by_signature_at_their_event_time() -> None:
    env = Envelope("r1", "a1", "gw", 2, T0 + 5)
    failed = ToolResult(env, "web_fetch", "{}", None, "HTTP 503 for request 1234")
    fine = ToolResult(Envelope("r2", "a1", "gw", 2, T0 + 6), "web_fetch", "{}", "ok")
    call = ToolCall(Envelope("r3", "a1", "gw", 1, T0 + 7), "web_fetch", "{}")
    values = [encode_event(failed), b"junk", encode_event(fine), encode_event(call)]
    out = failure_signals(messages("lg.events", values), CONTEXT, CONFIG, TOPICS.signals)
    (record,) = out.all_records()
    forwarded = decode_signal(record.value)
    assert (forwarded.tool, forwarded.kind, forwarded.run_id) == ("web_fetch", ERROR, "r1")
    assert record.key == forwarded.signature.encode() and record.timestamp == T0 + 5
    assert record.partition == partition_for(TOPICS.signals, record.key)
    assert out.offsets == {("lg.events", 0): 4}  # the junk is the guarding agent's
    off = IncidentConfig(enabled=False)
    quiet = failure_signals(messages("lg.events", values), CONTEXT, off, TOPICS.signals)
    assert quiet.records == {} and quiet.offsets == out.offsets


def cycle_decision(run: str, agent: str) -> Decision:
    agents = ["planner", "researcher", "reviewer"]
    turn = agents.index(agent)
    return Decision(
        run_id=run,
        agent_id=agent,
        gateway_id="gw",
        seq=4,
        event_time=T0,
        action=Action.WARN,
        detector="agent_cycle",
        severity="warning",
        count=3,
        tool_name="sessions_send",
        reason="agents planner → researcher → reviewer → planner sent the same messages",
        args_hash=f"sessions_send:{turn}abc",  # each edge its own message
        extra={"agents": json.dumps(agents[turn:] + agents[:turn])},
    )


def test_a_loop_between_agents_is_one_signature_named_by_its_agents() -> None:
    decisions = [cycle_decision(f"run-{a}", a) for a in ("planner", "researcher", "reviewer")]
    values = [encode_decision(d) for d in decisions]
    out = decision_signals(messages("lg.control", values), CONTEXT, CONFIG, TOPICS.signals)
    signals = [decode_signal(r.value) for r in out.all_records()]
    assert {(s.kind, s.detail) for s in signals} == {(CYCLE, "planner → researcher → reviewer")}
    book = IncidentBook(CONFIG)
    (incident,) = [i for s in signals for i in book.observe(s)]
    assert incident.label == (
        "agents planner → researcher → reviewer → planner pass the same messages round"
    )
    assert incident.agents == ("planner", "researcher", "reviewer")


# -- tracking -----------------------------------------------------------------------------


def test_signals_open_an_incident_and_the_tables_hold_what_the_next_batch_needs() -> None:
    tables, clock = Tables(), IncidentClock()
    incident = opened(tables, clock)
    assert incident.runs == ("r1", "r2", "r3") and incident.opened_at == T0
    key = incident.signature.encode()
    assert json.loads(tables.opened[key]) == incident.to_dict()
    # The same run again in the same window: nothing to publish.
    assert tables.track([signal("r3", "a2", T0 + 20)], clock, T0 + 20) == []
    # The next window: it goes on, and says so once (the trail learns its last window).
    (going_on,) = tables.track([signal("r1", "a1", T0 + WINDOW_MS + 5)], clock, T0 + 70_000)
    assert going_on.last_window == T0 + WINDOW_MS and going_on.runs == incident.runs
    assert tables.track([signal("r2", "a1", T0 + WINDOW_MS + 6)], clock, T0 + 70_000) == []


def test_batches_reach_the_incidents_replay_reaches() -> None:
    """The worker's batches and replay's book take the same signals to the same records."""
    rng = random.Random(7)
    signals = sorted(
        (
            signal(f"r{rng.randrange(8)}", f"a{rng.randrange(3)}", T0 + rng.randrange(400_000),
                   detail=rng.choice(("x", "y")))
            for _ in range(120)
        ),
        key=lambda s: s.event_time,
    )  # fmt: skip
    book = IncidentBook(CONFIG)
    expected = [i for s in signals for i in book.observe(s)]
    tables, clock, got = Tables(), IncidentClock(), []
    for start in range(0, len(signals), 17):
        batch = signals[start : start + 17]
        got += tables.track(batch, clock, batch[-1].event_time)
    assert expected and got == expected


# -- closing ------------------------------------------------------------------------------


def test_an_incident_closes_once_event_time_passes_its_quiet_window() -> None:
    """A worker working through a backlog: the wall clock is far ahead all along, but
    signals keep coming, so event time decides."""
    tables, clock = Tables(), IncidentClock()
    wall = T0 + 3_600_000
    incident = opened(tables, clock)
    clock.observe(T0 + 10, wall)  # taken just now
    assert tables.close(clock, wall) == []  # the wall clock alone does not close it
    other = signal("r9", "a9", incident.closes_at + LATENESS_MS - 1, detail="other")
    tables.track([other], clock, wall)
    assert tables.close(clock, wall) == []
    tables.track([signal("r9", "a9", incident.closes_at + LATENESS_MS, "other")], clock, wall)
    (closed,) = tables.close(clock, wall)
    assert closed == close(incident) and closed.closed_at == incident.closes_at
    assert incident.signature.encode() not in tables.opened


def test_an_incident_closes_on_the_wall_clock_once_nothing_more_comes() -> None:
    tables, clock = Tables(), IncidentClock()
    incident = opened(tables, clock)
    due = incident.closes_at + LATENESS_MS
    assert tables.close(clock, due - 1) == []
    (closed,) = tables.close(clock, due)
    assert closed.status == CLOSED and closed.closed_at == incident.closes_at
    assert tables.close(clock, due + 1) == []  # once


def test_a_restarted_worker_closes_what_it_recovered_once_quiet() -> None:
    tables, clock = Tables(), IncidentClock()
    incident = opened(tables, clock)
    restarted = IncidentClock()  # the tables recovered from their changelogs, a fresh clock
    later = incident.closes_at + 600_000
    assert tables.close(restarted, later) == []  # its first look: quiet from now
    (closed,) = tables.close(restarted, later + LATENESS_MS)
    assert closed.closed_at == incident.closes_at


def test_stale_tallies_are_forgotten() -> None:
    tables, clock = Tables(), IncidentClock()
    tables.track([signal("r1", "a1", T0 + 10)], clock, T0 + 10)
    assert len(tables.tallies) == 1
    tables.close(clock, T0 + 3 * WINDOW_MS + LATENESS_MS - 1)
    assert len(tables.tallies) == 1
    tables.close(clock, T0 + 3 * WINDOW_MS + LATENESS_MS)
    assert tables.tallies == {}


def test_a_switched_off_config_counts_nothing() -> None:
    out = track_signals(
        messages(TOPICS.signals, [encode_signal(signal("r1", "a1", T0))]),
        {}.get,
        {}.get,
        IncidentConfig(enabled=False),
        IncidentClock(),
        CONTEXT,
        TOPICS,
        T0,
    )
    assert (out.records, out.tally_writes, out.open_writes) == ({}, {}, {})
    assert isinstance(out, Produced) and out.offsets == {(TOPICS.signals, 0): 1}


def test_incident_records_are_read_back_and_an_unreadable_one_is_skipped() -> None:
    tables, clock = Tables(), IncidentClock()
    incident = opened(tables, clock)
    batch = messages(TOPICS.incidents, [encode_incident(incident), b"junk", None])
    read = read_incidents(batch, now=1.0, max_message_bytes=1 << 20)
    assert read.incidents == [incident]
    # issue 40: each unreadable record is kept for the trail, with its position and error
    assert [(d.offset, d.payload) for d in read.dead_letters] == [(1, b"junk"), (2, b"")]
    assert all("unreadable incident record" in d.error for d in read.dead_letters)


def test_a_poisoned_signal_is_dead_lettered_and_the_next_one_counted() -> None:
    """Issue 40: a signal nested 50,000 deep (or any other that fails) goes to the dead
    letters with its error; the good signal after it still opens the incident."""
    clock = IncidentClock()
    topics = IncidentTopics(TOPICS.signals, TOPICS.incidents, deadletter="lg.deadletter")
    good = [signal(r, a, T0 + 10) for r, a in (("r1", "a1"), ("r2", "a1"), ("r3", "a2"))]
    poison = [deep_signal(), b'{"tool": 1}', b"\xff"]
    batch = messages(TOPICS.signals, [*poison, *map(encode_signal, good)])
    out = track_signals(batch, {}.get, {}.get, CONFIG, clock, CONTEXT, topics, T0 + 10)
    assert [i.status for i in out.published] == [OPEN]
    letters = [decode_dead_letter(r.value) for r in out.all_records() if r.topic == "lg.deadletter"]
    assert [d.offset for d in letters] == [0, 1, 2]
    assert "nested deeper than" in letters[0].error
    assert out.offsets == {(TOPICS.signals, 0): 6}
