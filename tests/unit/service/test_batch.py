"""process_batch, the worker's per-batch work without Faust or a broker: the core's decisions,
records in order per partition, dead letters, re-keys, state writes once per run, offsets."""

from __future__ import annotations

from dataclasses import dataclass

from core_helpers import Run, fleet, guard, text_result

from streams.core.run_state import RunState
from streams.service.batch import (
    BatchOutput,
    BatchTopics,
    process_batch,
    writer_fingerprint,
)
from streams.service.config_book import ConfigBook
from streams.service.dead_letter_records import DEAD_LETTER_PAYLOAD_LIMIT
from streams.service.processor import EventProcessor
from streams.service.records import BatchContext
from streams.state.state_format import decode as decode_state
from streams.wire.avro import (
    Decision,
    decode_control,
    decode_dead_letter,
    decode_event,
    encode_event,
)
from streams.wire.schema_registry import default_registry
from streams.wire.single_object import MARKER

TOPICS = BatchTopics(
    events="lg.events", control="lg.control", deadletter="lg.deadletter", changelog="lg-changelog"
)
PARTITIONS = 4
BLOCK = {"enabled": True}


class NoOverrides:
    version = 0

    def get(self, key: str) -> None:
        return None


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def partition_for(topic: str, key: bytes | None) -> int:
    """A stand-in partitioner: stable per key (the real one is murmur2)."""
    return sum(key or b"") % PARTITIONS


def changelog_partition(key: bytes, state: RunState) -> int:
    return partition_for(TOPICS.changelog, state.session_id.encode() or key)


class Worker:
    """A table (dict) and a processor, fed batch by batch as the adapter does."""

    def __init__(self, *, per_run_watermarks: bool = False) -> None:
        self.per_run_watermarks = per_run_watermarks
        self.table: dict[bytes, RunState] = {}
        configs = ConfigBook(fleet(BLOCK), NoOverrides())
        self.processor = EventProcessor(self.table.get, configs.for_agent)
        self.offsets: dict[str, int] = {}

    def messages(self, events: list, key: bytes | None = None) -> list[Message]:
        out = []
        for event in events:
            run_key = key if key is not None else event.envelope.run_id.encode()
            partition = partition_for(TOPICS.events, run_key)
            offset = self.offsets.get(str(partition), 0)
            self.offsets[str(partition)] = offset + 1
            out.append(Message(TOPICS.events, partition, offset, run_key, encode_event(event)))
        return out

    def batch(self, messages: list[Message], max_bytes: int = 1 << 20) -> BatchOutput:
        out = process_batch(
            messages,
            self.processor,
            BatchContext(default_registry(), partition_for, max_bytes),
            TOPICS,
            now=1_700_000_000.0,
            per_run_watermarks=self.per_run_watermarks,
        )
        self.table.update({write.key: write.state for write in out.state_writes})
        return out


def looping(run_id: str, cycles: int = 30) -> list:
    run = Run(run_id=run_id)
    events = [run.make_start()]
    for _ in range(cycles):
        events.append(run.make_call("read", {"path": "a.txt"}))
        events.append(run.make_result("read", {"path": "a.txt"}, text_result("same")))
    return events


def interleaved(runs: list[list]) -> list:
    return [run[i] for i in range(max(map(len, runs))) for run in runs if i < len(run)]


def control_messages(out: BatchOutput) -> list:
    return [
        decode_control(record.value)
        for (topic, _), records in out.records.items()
        if topic == TOPICS.control
        for record in records
    ]


def test_batches_decide_as_the_core_decides_event_by_event() -> None:
    runs = [looping(f"run-{n}") for n in range(5)]
    events = interleaved(runs)
    worker = Worker()
    messages = worker.messages(events)
    decisions = []
    for start in range(0, len(messages), 13):  # batches that cut runs anywhere
        decisions += worker.batch(messages[start : start + 13]).decisions
    core = guard(BLOCK)
    expected = [d for e in events for d in core.process(e)]
    assert {d.action.value for d in expected} >= {"warn", "block"}  # it does decide
    assert sorted(decisions, key=repr) == sorted(expected, key=repr)
    # Per run, in the run's order.
    for run in runs:
        run_id = run[0].envelope.run_id
        assert [d for d in decisions if d.run_id == run_id] == [
            d for d in expected if d.run_id == run_id
        ]


def test_a_partitions_records_keep_decisions_before_the_runs_watermark() -> None:
    worker = Worker()
    out = worker.batch(worker.messages(looping("run-a")))
    key = b"run-a"
    control = out.records[(TOPICS.control, partition_for(TOPICS.control, key))]
    messages = [decode_control(r.value) for r in control]
    kinds = [type(m).__name__ for m in messages]
    assert kinds.count("Decision") >= 2
    assert kinds[-1] == "RunWatermarks" and "RunWatermarks" not in kinds[:-1]
    seqs = [m.seq for m in messages[:-1]]
    assert seqs == sorted(seqs)  # decisions in event order
    (mark,) = messages[-1].marks
    assert mark.run_id == "run-a" and mark.seq == len(looping("run-a"))  # every event applied
    assert control[-1].key is None  # a partition's record, not a run's
    source = (TOPICS.events, partition_for(TOPICS.events, key))
    assert {r.source for r in control} == {source}  # committed with the events' offsets


def runs_on_one_partition(count: int) -> list[str]:
    """``count`` run ids the producer's partitioner puts on the same control partition."""
    by_partition: dict[int, list[str]] = {}
    n = 0
    while True:
        run_id = f"run-{n}"
        same = by_partition.setdefault(partition_for(TOPICS.control, run_id.encode()), [])
        same.append(run_id)
        if len(same) == count:
            return same
        n += 1


def test_a_partitions_watermarks_go_out_as_one_record_after_its_decisions() -> None:
    run_ids = runs_on_one_partition(3)
    worker = Worker()
    out = worker.batch(worker.messages(interleaved([looping(r) for r in run_ids])))
    control = out.records[(TOPICS.control, partition_for(TOPICS.control, run_ids[0].encode()))]
    messages = [decode_control(r.value) for r in control]
    assert [type(m).__name__ for m in messages[:-1]] == ["Decision"] * (len(messages) - 1)
    assert len(messages) > 3  # the runs did decide
    marks = messages[-1].marks  # one record, every run's watermark
    assert sorted(m.run_id for m in marks) == sorted(run_ids)
    assert {m.seq for m in marks} == {len(looping(run_ids[0]))}


def test_per_run_watermarks_go_out_one_record_per_run_for_older_gateways() -> None:
    run_ids = runs_on_one_partition(2)
    worker = Worker(per_run_watermarks=True)
    out = worker.batch(worker.messages(interleaved([looping(r) for r in run_ids])))
    control = out.records[(TOPICS.control, partition_for(TOPICS.control, run_ids[0].encode()))]
    marks = [(r.key, decode_control(r.value)) for r in control[-2:]]
    assert [type(m).__name__ for _, m in marks] == ["RunWatermark", "RunWatermark"]
    assert sorted((key, m.run_id) for key, m in marks) == [(r.encode(), r) for r in run_ids]


def test_state_is_written_once_per_run_per_batch_and_holds_the_batchs_last_event() -> None:
    worker = Worker()
    runs = [looping("run-a"), looping("run-b")]
    out = worker.batch(worker.messages(interleaved(runs)))
    changelog = [
        r for (topic, _), rs in out.records.items() if topic == TOPICS.changelog for r in rs
    ]
    assert sorted(r.key for r in changelog) == [b"run-a", b"run-b"]
    assert sorted(w.key for w in out.state_writes) == [b"run-a", b"run-b"]
    for record in changelog:
        state = decode_state(record.value)
        assert state.last_seq == len(runs[0])
        assert record.partition == changelog_partition(record.key, state)
    # The next batch starts from the stored state: a new event writes the run once again.
    run = Run(run_id="run-a")
    run.seq = len(runs[0])
    again = worker.batch(worker.messages([run.make_call("ls", {})]))
    assert [w.key for w in again.state_writes] == [b"run-a"]
    assert again.state_writes[0].state.last_seq == len(runs[0]) + 1


def test_bad_input_is_dead_lettered_in_place_and_its_offset_still_committed() -> None:
    worker = Worker()
    good = worker.messages(looping("run-a", cycles=1))
    junk = Message(TOPICS.events, 1, 7, b"k", b"not avro at all")
    huge = Message(TOPICS.events, 1, 8, b"k", MARKER + b"\x00" * 200_000)
    seq0 = Run(run_id="run-z", start_seq=0).make_start()  # decodes; the processor refuses it
    refused = worker.messages([seq0])
    out = worker.batch([*good, junk, huge, *refused], max_bytes=100_000)
    letters = [
        decode_dead_letter(r.value)
        for (topic, _), rs in out.records.items()
        if topic == TOPICS.deadletter
        for r in rs
    ]
    assert [(d.partition, d.offset) for d in letters[:2]] == [(1, 7), (1, 8)]
    assert letters[0].payload == b"not avro at all"
    assert len(letters[1].payload) == DEAD_LETTER_PAYLOAD_LIMIT
    assert "truncated" in letters[1].error
    assert "seq must be 1 or more" in letters[2].error
    assert out.dead_letters == letters
    assert sum(out.dead_letter_kinds.values()) == 3
    assert out.dead_letter_kinds["invalid_event"] == 1
    assert out.offsets[(TOPICS.events, 1)] == 9
    assert out.event_kinds.total() == len(good) + 1  # decoded: the good ones and the refused


def test_a_mis_keyed_event_is_re_keyed_and_decides_nothing_here() -> None:
    worker = Worker()
    (message,) = worker.messages(looping("run-a", cycles=0), key=b"wrong-key")
    out = worker.batch([message])
    assert [(r.key, r.value) for r in out.rekeys] == [(b"run-a", message.value)]
    assert out.records == {} and out.state_writes == []
    assert out.offsets == {(TOPICS.events, message.partition): message.offset + 1}


def test_offsets_are_the_next_offset_per_source_partition() -> None:
    worker = Worker()
    messages = worker.messages(interleaved([looping(f"run-{n}", cycles=2) for n in range(6)]))
    out = worker.batch(messages)
    expected: dict = {}
    for m in messages:
        expected[(m.topic, m.partition)] = max(
            expected.get((m.topic, m.partition), 0), m.offset + 1
        )
    assert out.offsets == expected
    assert out.newest_event_time_ms == max(
        decode_event(m.value).envelope.event_time for m in messages
    )
    assert all(isinstance(d, Decision) for d in out.decisions)


def test_the_writer_fingerprint_is_read_from_the_frame() -> None:
    (message,) = Worker().messages(looping("run-a", cycles=0))
    fingerprint = writer_fingerprint(message.value)
    assert fingerprint is not None and fingerprint in default_registry()
    assert writer_fingerprint(b"junk") is None and writer_fingerprint(None) is None
