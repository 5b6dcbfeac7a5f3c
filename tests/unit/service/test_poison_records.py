"""Issue 40 at the service seam, without a broker: each per-batch function isolates each
record's failure, whatever the exception, and handles the good record after it."""

from __future__ import annotations

from dataclasses import dataclass

from core_helpers import Run, fleet
from poison_records import decision, deep_extra_decision

from streams.core.incident_config import IncidentConfig
from streams.service.agent_cycles import CycleTopics, apply_sends
from streams.service.batch import BatchTopics, process_batch
from streams.service.config_book import ConfigBook
from streams.service.control_audit import read_control
from streams.service.incidents import decision_signals
from streams.service.processor import EventProcessor
from streams.service.records import BatchContext
from streams.wire.avro import (
    RunWatermark,
    decode_dead_letter,
    encode_decision,
    encode_event,
    encode_watermarks,
)
from streams.wire.schema_registry import ParsedSchema, SchemaRegistry

CONTROL, EVENTS, DEADLETTER = "lg.control", "lg.events", "lg.deadletter"


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def partition_for(topic: str, key: bytes | None) -> int:
    return sum(key or b"") % 4


class NoOverrides:
    version = 0

    def get(self, key: str) -> None:
        return None


def batch(topic: str, values: list[bytes | None], key: bytes = b"k") -> list[Message]:
    return [Message(topic, 0, n, key, value) for n, value in enumerate(values)]


def configs() -> ConfigBook:
    return ConfigBook(fleet({"enabled": True}), NoOverrides())


POISON = [deep_extra_decision("poisoned", 1), b"\xc3\x01" + b"\x00" * 8 + b"junk", b"\x00"]


def test_the_audit_agents_batch_keeps_each_bad_control_record_as_a_dead_letter() -> None:
    good = decision("after-the-poison", 7)
    mark = RunWatermark(run_id="after-the-poison", agent_id="a", gateway_id="g", seq=7,
                        event_time=1)  # fmt: skip
    values = [*POISON, encode_decision(good), encode_watermarks([mark])]
    read = read_control(batch(CONTROL, values), None, now=2.0, max_message_bytes=1 << 20)
    assert read.decisions == [good] and read.watermarks == [mark] and not read.forged
    assert [(d.source_topic, d.offset) for d in read.dead_letters] == [
        (CONTROL, 0), (CONTROL, 1), (CONTROL, 2),
    ]  # fmt: skip
    assert "nested deeper than 64 levels" in read.dead_letters[0].error
    assert read.dead_letters[0].payload == POISON[0] and read.dead_letters[0].event_time == 2000


def test_forwarding_decisions_to_incidents_skips_a_poisoned_record() -> None:
    context = BatchContext(SchemaRegistry(), partition_for, 1 << 20)
    values = [*POISON, encode_decision(decision("after-the-poison", 7))]
    out = decision_signals(batch(CONTROL, values), context, IncidentConfig(enabled=True), "sig")
    assert out.offsets == {(CONTROL, 0): 4}  # all consumed, none raised


class FailingRegistry(SchemaRegistry):
    """A real registry that fails on one writer schema the way no codec error does (as the
    RecursionError of issue 40 did), to prove the guard's loop isolates any failure."""

    def writer_for(self, fingerprint: bytes, reader: ParsedSchema) -> ParsedSchema:
        if fingerprint == b"\x07" * 8:
            raise RecursionError("maximum recursion depth exceeded")
        return super().writer_for(fingerprint, reader)


def test_the_guard_dead_letters_an_event_that_fails_to_decode_in_any_way() -> None:
    run = Run(run_id="after-the-poison")
    good = [encode_event(run.make_start()), encode_event(run.make_call("read", {"p": 1}))]
    poisoned = good[1][:2] + b"\x07" * 8 + good[1][10:]
    table: dict = {}
    processor = EventProcessor(table.get, configs().for_agent)
    context = BatchContext(FailingRegistry(), partition_for, 1 << 20)
    topics = BatchTopics(EVENTS, CONTROL, DEADLETTER, "lg-changelog")
    messages = batch(EVENTS, [poisoned, *good], key=b"after-the-poison")
    out = process_batch(messages, processor, context, topics, now=1.0)
    assert [d.offset for d in out.dead_letters] == [0]
    assert "undecodable event: RecursionError" in out.dead_letters[0].error
    assert out.dead_letter_kinds == {"undecodable": 1}
    assert sum(out.event_kinds.values()) == 2
    assert [w.key for w in out.state_writes] == [b"after-the-poison"]


def test_agent_cycles_dead_letter_a_send_they_cannot_apply() -> None:
    run = Run(run_id="sender")
    send = encode_event(run.make_call("sessions_send", {"sessionKey": "b", "message": "hi"}))
    context = BatchContext(SchemaRegistry(), partition_for, 1 << 20)
    topics = CycleTopics(CONTROL, "lg-cycles", deadletter=DEADLETTER)
    config = configs().for_agent
    out = apply_sends(batch("lg.sends", [*POISON, send]), {}.get, config, context, topics)
    letters = [decode_dead_letter(r.value) for r in out.all_records() if r.topic == DEADLETTER]
    assert [d.offset for d in letters] == [0, 1, 2]
    assert list(out.graph_writes) == [b"k"]  # the good send was applied
