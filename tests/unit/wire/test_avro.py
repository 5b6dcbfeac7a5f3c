"""Tests for the Avro single-object codec: round trips, evolution, framing errors, fuzzing.

The codec runs on fastavro; the reference ``avro`` package is used here as an independent
implementation: it writes the evolved-schema messages the codec must resolve, and the property
tests check that bytes cross between the two in both directions.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from dataclasses import MISSING, fields, replace
from typing import Any

import avro.io
import avro.schema
import pytest
from avro_reference import (
    avro_decode,
    avro_encode,
    avro_write,
    body_branch,
    plain_avro_schema,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core.engine import core_build
from streams.core.events import (
    EVENT_KINDS,
    Action,
    AgentEvent,
    CompactionRetry,
    Decision,
    Envelope,
    RunEnded,
    RunStarted,
    ToolCall,
    ToolResult,
    event_to_dict,
)
from streams.wire import avro as avro_codec
from streams.wire.avro import (
    MARKER,
    BadMarkerError,
    CodecError,
    DeadLetterRecord,
    EncodeError,
    InvalidDatumError,
    InvalidSchemaError,
    MissingRunIdError,
    PayloadTooLargeError,
    SchemaMismatchError,
    SchemaRegistry,
    TruncatedMessageError,
    UnknownSchemaError,
    decode_control,
    decode_dead_letter,
    decode_decision,
    decode_event,
    encode_dead_letter,
    encode_decision,
    encode_event,
    event_schema_fingerprint,
    event_schema_json,
    load_schemas,
    parsing_canonical_form,
    schema_fingerprint,
    schema_json_for,
)
from streams.wire.names import NAME_MAX_BYTES

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
ENV = Envelope(run_id="run-1", agent_id="agent-1", gateway_id="gw-1", seq=7, event_time=1_700_000)

SAMPLE_EVENTS: list[AgentEvent] = [
    ToolCall(ENV, "grep", '{"pattern": "todo"}', "call-1"),
    ToolCall(ENV, "noop"),
    ToolResult(ENV, "grep", '{"pattern": "todo"}', '{"hits": 2}', None, "call-1"),
    ToolResult(ENV, "grep"),
    ToolResult(ENV, "grep", error="permission denied"),
    CompactionRetry(ENV),
    CompactionRetry(ENV, trigger="manual"),
    RunStarted(ENV),
    RunEnded(ENV),
    RunEnded(ENV, status="aborted"),
]

SAMPLE_DECISION = Decision(
    run_id="run-1",
    agent_id="agent-1",
    gateway_id="gw-1",
    seq=12,
    event_time=1_700_000_123,
    action=Action.BLOCK,
    detector="repeat_call",
    severity="critical",
    count=5,
    tool_name="grep",
    reason="same call 5 times",
    args_hash="abc",
    extra={"window": 10, "tools": ["grep", "ls"], "ratio": 0.5, "note": "ü", "none": None},
)


def schema_dict(name: str) -> dict[str, Any]:
    return json.loads((avro_codec.SCHEMA_DIR / f"{name}.avsc").read_text())


# ----------------------------------------------------------------------------- schemas


def test_schemas_load_and_mirror_the_dataclasses() -> None:
    schemas = load_schemas()
    assert set(schemas) == {"AgentEvent", "Decision", "RunWatermark", "RunWatermarks", "DeadLetter"}
    event = schemas["AgentEvent"]
    assert event.fullname == "loopguard.AgentEvent"
    envelope = [f.name for f in fields(Envelope)]
    # session_id came later (issue 17): appended after body, as schema evolution requires
    # chain_id came later still (issue 28), appended the same way
    assert envelope[-2:] == ["session_id", "chain_id"]
    assert [f.name for f in event.fields] == [*envelope[:-2], "body", "session_id", "chain_id"]
    branches = {b.fullname: b for b in event.fields_dict["body"].type.schemas}
    assert set(branches) == {f"loopguard.{cls.__name__}" for cls in EVENT_KINDS.values()}
    for cls in EVENT_KINDS.values():
        record = branches[f"loopguard.{cls.__name__}"]
        body_fields = [f for f in fields(cls) if f.name != "envelope"]
        assert [f.name for f in record.fields] == [f.name for f in body_fields]
        for f in body_fields:  # schema defaults mirror dataclass defaults
            if f.default is not MISSING:
                assert record.fields_dict[f.name].default == f.default, (cls, f.name)
    decision = schemas["Decision"]
    assert [f.name for f in decision.fields] == [f.name for f in fields(Decision)] + ["decision_id"]
    assert decision.fields_dict["action"].type.symbols == [a.value for a in Action]
    assert [f.name for f in schemas["DeadLetter"].fields] == [
        "source_topic",
        "partition",
        "offset",
        "error",
        "key",
        "payload",
        "event_time",
    ]


# Vectors from Avro's share/test/data/schema-tests.txt (checked there against Java).
SPEC_VECTORS = [
    ('"null"', '"null"', 7195948357588979594),
    ('{"type":"int"}', '"int"', None),
    ('"long"', '"long"', -3434872931120570953),
    ('"string"', '"string"', -8142146995180207161),
    ('[ "int" , {"type":"boolean"} ]', '["int","boolean"]', 5392556393470105090),
    (
        '{"fields":[], "type":"record", "name":"foo", "namespace":"x.y"}',
        '{"name":"x.y.foo","type":"record","fields":[]}',
        5916914534497305771,
    ),
    (
        '{"fields":[{"type":"boolean", "aliases":[], "name":"f1", "default":true},'
        '{"order":"descending","name":"f2","doc":"Hello","type":"int"}],'
        '"type":"record", "name":"foo"}',
        '{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"},'
        '{"name":"f2","type":"int"}]}',
        -4860222112080293046,
    ),
    (
        '{"namespace":"x.y.z", "type":"enum", "name":"foo", "doc":"foo bar",'
        ' "symbols":["A1", "A2"]}',
        '{"name":"x.y.z.foo","type":"enum","symbols":["A1","A2"]}',
        -4448647247586288245,
    ),
    (
        '{"namespace":"x.y.z", "type":"fixed", "name":"foo", "doc":"foo bar", "size":32}',
        '{"name":"x.y.z.foo","type":"fixed","size":32}',
        -3064184465700546786,
    ),
    ('{ "items":{"type":"null"}, "type":"array"}', '{"type":"array","items":"null"}', None),
    (
        '{ "values":"string", "type":"map"}',
        '{"type":"map","values":"string"}',
        -8732877298790414990,
    ),
    (
        '{"name":"PigValue","type":"record",'
        '"fields":[{"name":"value", "type":["null", "int", "long", "PigValue"]}]}',
        '{"name":"PigValue","type":"record","fields":[{"name":"value",'
        '"type":["null","int","long","PigValue"]}]}',
        -1759257747318642341,
    ),
    # Java drops logical types and extra props on primitives (avro-python keeps {"type":"long"}).
    ('{"type":"long","logicalType":"timestamp-millis"}', '"long"', -3434872931120570953),
    ('{"type":"string","avro.java.string":"String"}', '"string"', -8142146995180207161),
]


@pytest.mark.parametrize(("schema_json", "canonical", "fingerprint"), SPEC_VECTORS)
def test_parsing_canonical_form_and_fingerprint_match_the_spec(
    schema_json: str, canonical: str, fingerprint: int | None
) -> None:
    # JSON text, decoded JSON (a str is always taken as JSON text) and an avro-package Schema
    # all canonicalise the same way.
    decoded = json.loads(schema_json)
    forms = [schema_json, avro.schema.parse(schema_json)]
    if not isinstance(decoded, str):
        forms.append(decoded)
    for schema in forms:
        assert parsing_canonical_form(schema) == canonical
        if fingerprint is not None:
            assert int.from_bytes(schema_fingerprint(schema), "little", signed=True) == fingerprint


def test_fingerprint_agrees_with_avro_package_where_it_is_correct() -> None:
    schema = plain_avro_schema(schema_dict("AgentEvent"))  # avro only differs on logical types
    assert schema.fingerprint() == schema_fingerprint(schema) == event_schema_fingerprint()
    assert schema_fingerprint(avro_codec.SCHEMA_DIR.joinpath("AgentEvent.avsc").read_text()) == (
        event_schema_fingerprint()
    )


def test_encoded_event_uses_single_object_framing() -> None:
    data = encode_event(SAMPLE_EVENTS[0])
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == event_schema_fingerprint()


def test_event_bytes_are_standard_avro_readable_by_the_avro_package() -> None:
    event = ToolResult(ENV, "grep", "{}", None, "boom", "c")
    data = encode_event(event)
    reader = avro.io.DatumReader(load_schemas()["AgentEvent"])
    datum = reader.read(avro.io.BinaryDecoder(io.BytesIO(data[10:])))
    assert datum["run_id"] == "run-1" and datum["seq"] == 7
    assert datum["body"] == {
        "tool_name": "grep",
        "args_json": "{}",
        "result_json": None,
        "error": "boom",
        "tool_call_id": "c",
    }


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("event", SAMPLE_EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_kind_round_trips(event: AgentEvent) -> None:
    assert decode_event(encode_event(event)) == event


def test_unicode_empty_large_and_extreme_values_round_trip() -> None:
    env = Envelope("rün-🚀", "агент", "网关", LONG_MAX, LONG_MIN)
    for event in [
        ToolCall(env, "工具", "{}", None),
        ToolCall(env, "big", json.dumps({"blob": "x" * 600_000})),
        ToolResult(env, "", "", "", "", ""),
        ToolResult(env, "t", result_json="\x00\u2028\U0010ffff"),
        RunEnded(replace(env, seq=-1, event_time=0), status=""),
    ]:
        assert decode_event(encode_event(event)) == event


def test_bytearray_and_memoryview_input_decode() -> None:
    data = encode_event(SAMPLE_EVENTS[0])
    assert decode_event(bytearray(data)) == SAMPLE_EVENTS[0]
    assert decode_event(memoryview(data)) == SAMPLE_EVENTS[0]


def test_decision_round_trips_with_json_extra() -> None:
    assert decode_decision(encode_decision(SAMPLE_DECISION)) == SAMPLE_DECISION
    bare = replace(SAMPLE_DECISION, extra={}, action=Action.WARN)
    assert decode_decision(encode_decision(bare)) == bare
    # A string that looks like JSON stays a string: every value is JSON-encoded.
    tricky = replace(SAMPLE_DECISION, extra={"a": "1", "b": 1, "c": "null", "d": None})
    assert decode_decision(encode_decision(tricky)).extra == tricky.extra


def test_decision_carries_decision_id() -> None:
    data = encode_decision(SAMPLE_DECISION)
    reader = avro.io.DatumReader(load_schemas()["Decision"])
    datum = reader.read(avro.io.BinaryDecoder(io.BytesIO(data[10:])))
    assert datum["decision_id"] == SAMPLE_DECISION.decision_id
    assert datum["action"] == "block"
    assert datum["extra"]["note"] == '"ü"'


def test_decision_rejects_non_json_extra() -> None:
    for extra in [{"s": {1, 2}}, {"nan": float("nan")}, {1: "int key"}]:
        with pytest.raises(EncodeError):
            encode_decision(replace(SAMPLE_DECISION, extra=extra))


def test_dead_letter_round_trips() -> None:
    letters = [
        DeadLetterRecord(
            source_topic="events",
            partition=3,
            offset=LONG_MAX,
            error="BadMarkerError: bad marker 7b22",
            key=b"run-1",
            payload=b'{"not": "avro"}',
            event_time=1_700_000_000_000,
        ),
        DeadLetterRecord(
            source_topic="e",
            partition=0,
            offset=0,
            error="",
            payload=b"\x00" * 1_500_000,
            event_time=0,
        ),
    ]
    for letter in letters:
        assert decode_dead_letter(encode_dead_letter(letter)) == letter


# ----------------------------------------------------------------------------- evolution


def newer_event_schema() -> str:
    """Our schema as a newer gateway might ship it: ToolCall gained an optional field."""
    schema = schema_dict("AgentEvent")
    body_branch(schema, "ToolCall")["fields"].insert(
        1, {"name": "model", "type": ["null", "string"], "default": None}
    )
    return json.dumps(schema)


def test_newer_writer_with_extra_optional_field_decodes_on_old_reader() -> None:
    registry = SchemaRegistry()
    schema_json = newer_event_schema()
    fingerprint = registry.register(schema_json)
    assert fingerprint != event_schema_fingerprint()
    assert registry.register(schema_json) == fingerprint  # idempotent
    datum = {
        "run_id": "run-9",
        "agent_id": "a",
        "gateway_id": "g",
        "seq": 3,
        "event_time": 99,
        "body": {"tool_name": "grep", "model": "gpt-x", "args_json": "{}", "tool_call_id": "c"},
    }
    data = avro_write(schema_json, datum, "ToolCall")
    assert data[2:10] == fingerprint

    decoded = decode_event(data, registry)
    assert decoded == ToolCall(Envelope("run-9", "a", "g", 3, 99), "grep", "{}", "c")
    with pytest.raises(UnknownSchemaError):  # the default registry has not seen it
        decode_event(data)


def test_older_writer_missing_a_defaulted_field_gets_the_default() -> None:
    schema = schema_dict("AgentEvent")
    call = body_branch(schema, "ToolCall")
    call["fields"] = [f for f in call["fields"] if f["name"] != "tool_call_id"]
    schema_json = json.dumps(schema)
    registry = SchemaRegistry()
    registry.register(schema_json)
    datum = {
        "run_id": "r",
        "agent_id": "a",
        "gateway_id": "g",
        "seq": 1,
        "event_time": 2,
        "body": {"tool_name": "ls", "args_json": "[]"},
    }
    decoded = decode_event(avro_write(schema_json, datum, "ToolCall"), registry)
    assert decoded == ToolCall(Envelope("r", "a", "g", 1, 2), "ls", "[]", None)


def test_newer_writer_with_unknown_event_kind() -> None:
    schema = schema_dict("AgentEvent")
    body = next(f for f in schema["fields"] if f["name"] == "body")
    body["type"].append(
        {"type": "record", "name": "ToolTimeout", "fields": [{"name": "ms", "type": "long"}]}
    )
    schema_json = json.dumps(schema)
    registry = SchemaRegistry()
    registry.register(schema_json)
    envelope = {"run_id": "r", "agent_id": "a", "gateway_id": "g", "seq": 1, "event_time": 2}
    known = avro_write(schema_json, {**envelope, "body": {"status": "done"}}, "RunEnded")
    assert decode_event(known, registry) == RunEnded(Envelope("r", "a", "g", 1, 2), "done")
    unknown = avro_write(schema_json, {**envelope, "body": {"ms": 5000}}, "ToolTimeout")
    with pytest.raises(SchemaMismatchError, match="ToolTimeout"):
        decode_event(unknown, registry)


def test_registry_lookup_and_publishing() -> None:
    fingerprint = event_schema_fingerprint()
    published = event_schema_json()
    assert schema_json_for(fingerprint) == published
    assert SchemaRegistry(schema_texts=[]).register(published) == fingerprint
    assert fingerprint in SchemaRegistry()
    with pytest.raises(UnknownSchemaError):
        schema_json_for(b"\x00" * 8)
    for bad in ["not json", '{"type": "record"}', '{"type": "nope"}']:
        with pytest.raises(InvalidSchemaError):
            SchemaRegistry().register(bad)


def test_unknown_fingerprint_raises_unknown_schema_error() -> None:
    data = bytearray(encode_event(SAMPLE_EVENTS[0]))
    data[2] ^= 0xFF
    with pytest.raises(UnknownSchemaError, match="unknown writer schema fingerprint") as info:
        decode_event(bytes(data))
    assert info.value.fingerprint == bytes(data[2:10])


def test_message_of_another_schema_is_a_mismatch() -> None:
    with pytest.raises(SchemaMismatchError, match="loopguard.Decision"):
        decode_event(encode_decision(SAMPLE_DECISION))
    with pytest.raises(SchemaMismatchError):
        decode_decision(encode_event(SAMPLE_EVENTS[0]))


def test_newer_decision_schema_with_a_new_action_symbol() -> None:
    schema = schema_dict("Decision")
    action = next(f for f in schema["fields"] if f["name"] == "action")
    action["type"]["symbols"].append("pause")
    schema["fields"].insert(-1, {"name": "note", "type": ["null", "string"], "default": None})
    schema_json = json.dumps(schema)
    registry = SchemaRegistry()
    header = MARKER + registry.register(schema_json)
    plain = plain_avro_schema(schema)
    data = encode_decision(SAMPLE_DECISION)
    datum = {**avro_decode(PLAIN_DECISION, data[10:]), "note": "from a newer gateway"}
    assert decode_decision(header + avro_encode(plain, datum), registry) == SAMPLE_DECISION
    paused = header + avro_encode(plain, {**datum, "action": "pause"})
    with pytest.raises(SchemaMismatchError, match="pause"):
        decode_decision(paused, registry)


def decision_schema_before_enforced() -> dict[str, Any]:
    """Decision as workers wrote it before shadow mode (issue 17): no ``enforced``."""
    schema = schema_dict("Decision")
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "enforced"]
    return schema


def test_older_decision_writer_without_enforced_reads_as_enforced() -> None:
    """A newer worker or gateway reads an older worker's decisions: enforced, as they were."""
    old = decision_schema_before_enforced()
    registry = SchemaRegistry()
    header = MARKER + registry.register(json.dumps(old))
    datum = avro_decode(PLAIN_DECISION, encode_decision(SAMPLE_DECISION)[10:])
    del datum["enforced"]
    old_bytes = header + avro_encode(plain_avro_schema(old), datum)
    decoded = decode_decision(old_bytes, registry)
    assert decoded.enforced is True
    assert decoded == SAMPLE_DECISION
    with pytest.raises(UnknownSchemaError):  # a reader must know the writer's schema
        decode_decision(old_bytes)


def test_older_decision_reader_skips_enforced() -> None:
    """An older reader (the schema without ``enforced``) resolves a newer writer's decision:
    every field it knows comes back, the new one is skipped."""
    observed = replace(SAMPLE_DECISION, enforced=False)
    payload = encode_decision(observed)[10:]
    old_reader = plain_avro_schema(decision_schema_before_enforced())
    stream = io.BytesIO(payload)
    datum = avro.io.DatumReader(PLAIN_DECISION, old_reader).read(avro.io.BinaryDecoder(stream))
    assert stream.tell() == len(payload)
    assert "enforced" not in datum
    expected = avro_decode(PLAIN_DECISION, payload)
    assert expected.pop("enforced") is False
    assert datum == expected


def test_enforced_round_trips_both_ways() -> None:
    for enforced in (True, False):
        decision = replace(SAMPLE_DECISION, enforced=enforced)
        decoded = decode_decision(encode_decision(decision))
        assert decoded.enforced is enforced
        assert decoded == decision
        assert decode_control(encode_decision(decision)) == decision


def test_evolved_messages_truncated_or_with_trailing_bytes() -> None:
    datum = {
        "run_id": "r",
        "agent_id": "a",
        "gateway_id": "g",
        "seq": 1,
        "event_time": 2,
        "body": {"tool_name": "t", "model": "m", "args_json": "{}", "tool_call_id": "c"},
    }
    data = avro_write(newer_event_schema(), datum, "ToolCall")
    assert decode_event(data, EVOLVED) == ToolCall(Envelope("r", "a", "g", 1, 2), "t", "{}", "c")
    for cut in range(len(data)):
        with pytest.raises(TruncatedMessageError):
            decode_event(data[:cut], EVOLVED)
    with pytest.raises(InvalidDatumError, match="trailing"):
        decode_event(data + b"\x00", EVOLVED)


# ---------------------------------------------------------------------- framing errors


def test_every_truncation_is_a_truncated_message_error() -> None:
    for event in SAMPLE_EVENTS[:3]:
        data = encode_event(event)
        for cut in range(len(data)):
            with pytest.raises(TruncatedMessageError):
                decode_event(data[:cut])


def test_wrong_marker_random_bytes_and_trailing_bytes() -> None:
    data = encode_event(SAMPLE_EVENTS[0])
    with pytest.raises(BadMarkerError):
        decode_event(b"\xc3\x02" + data[2:])
    with pytest.raises(BadMarkerError):
        decode_event(b'{"kind": "tool_call"}')
    with pytest.raises(BadMarkerError):
        decode_event(b"\x00")
    with pytest.raises(InvalidDatumError, match="trailing"):
        decode_event(data + b"\x00")
    with pytest.raises(InvalidDatumError):
        decode_event("not bytes")  # type: ignore[arg-type]


def test_corrupt_datum_is_invalid_datum_error() -> None:
    header = MARKER + event_schema_fingerprint()
    with pytest.raises(InvalidDatumError, match="union branch index"):
        # run_id "r", 3 empty strings... then body index 9 (zigzag 18)
        decode_event(header + b"\x02r\x00\x00\x02\x02\x12")
    with pytest.raises(InvalidDatumError, match="UnicodeDecodeError"):
        decode_event(header + b"\x02\xff\x00\x00\x02\x02\x06")


def test_negative_length_is_invalid_not_truncated() -> None:
    header = MARKER + event_schema_fingerprint()
    with pytest.raises(InvalidDatumError) as info:  # run_id length -2 (zigzag 3)
        decode_event(header + b"\x03r\x00\x00\x02\x02\x06")
    assert not isinstance(info.value, TruncatedMessageError)


def test_dead_letter_int_outside_the_32_bit_range_is_invalid() -> None:
    letter = DeadLetterRecord(
        source_topic="t", partition=1, offset=2, error="e", payload=b"p", event_time=3
    )
    header = encode_dead_letter(letter)[:10]
    wide = schema_dict("DeadLetter")
    next(f for f in wide["fields"] if f["name"] == "partition")["type"] = "long"
    datum = {f.name: getattr(letter, f.name) for f in fields(letter)}
    for partition, ok in [(2**31 - 1, True), (2**31, False), (-(2**31) - 1, False)]:
        data = header + avro_encode(plain_avro_schema(wide), {**datum, "partition": partition})
        if ok:
            assert decode_dead_letter(data).partition == partition
        else:
            with pytest.raises(InvalidDatumError, match="outside its range"):
                decode_dead_letter(data)
    with pytest.raises(EncodeError, match="DeadLetter.partition must be an int in the 32-bit"):
        encode_dead_letter(replace(letter, partition=2**31))


def test_oversized_payload() -> None:
    data = encode_event(SAMPLE_EVENTS[0])
    with pytest.raises(PayloadTooLargeError, match="over the 20-byte limit"):
        decode_event(data, max_size=20)
    with pytest.raises(PayloadTooLargeError):
        decode_event(data + b"\x00" * avro_codec.DEFAULT_MAX_MESSAGE_SIZE)
    huge = ToolCall(ENV, "t", "x" * avro_codec.DEFAULT_MAX_MESSAGE_SIZE)
    with pytest.raises(PayloadTooLargeError):
        encode_event(huge)
    assert decode_event(encode_event(huge, max_size=2**21), max_size=2**21) == huge


def test_empty_run_id_is_missing_run_id() -> None:
    with pytest.raises(MissingRunIdError):
        encode_event(RunStarted(replace(ENV, run_id="")))
    with pytest.raises(MissingRunIdError):
        encode_decision(replace(SAMPLE_DECISION, run_id=""))
    data = encode_event(RunStarted(replace(ENV, run_id="x")))
    assert data[10:12] == b"\x02x"
    with pytest.raises(MissingRunIdError, match="missing run_id"):
        decode_event(data[:10] + b"\x00" + data[12:])


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: ToolCall(ENV, None), "ToolCall.tool_name must be a str"),  # type: ignore[arg-type]
        (lambda: ToolCall(ENV, "t", None), "ToolCall.args_json"),
        (lambda: ToolResult(ENV, "t", error=3), "ToolResult.error"),  # type: ignore[arg-type]
        (lambda: RunStarted(replace(ENV, seq=LONG_MAX + 1)), "AgentEvent.seq"),
        (lambda: RunStarted(replace(ENV, event_time=1.5)), "AgentEvent.event_time"),  # type: ignore[arg-type]
        (lambda: ToolCall(ENV, "\ud800"), "UnicodeEncodeError"),
        (lambda: "not an event", "not an AgentEvent"),
    ],
)
def test_encode_errors_name_the_field(build: Callable[[], Any], match: str) -> None:
    try:
        event = build()
    except TypeError:  # the compiled event classes (setup.py) refuse a wrong type when built
        assert core_build() != "interpreted"
        return
    with pytest.raises(EncodeError, match=match):
        encode_event(event)


def test_a_bool_seq_is_refused_or_stored_as_int() -> None:
    event = RunStarted(replace(ENV, seq=True))
    if core_build() == "interpreted":
        with pytest.raises(EncodeError, match="AgentEvent.seq"):
            encode_event(event)
    else:  # a compiled (setup.py) int field stores a bool as the int it is
        assert type(event.envelope.seq) is int and event.envelope.seq == 1


@pytest.mark.parametrize(
    "event",
    [
        RunStarted(replace(ENV, run_id="nul\x00byte")),
        RunStarted(replace(ENV, agent_id="a" * (NAME_MAX_BYTES + 1))),
        RunStarted(replace(ENV, gateway_id="\x00")),
        RunStarted(replace(ENV, run_id="🌀" * (NAME_MAX_BYTES // 4 + 1))),
        ToolCall(ENV, "exec\x00", "{}"),
        ToolResult(ENV, "t" * (NAME_MAX_BYTES + 1)),
    ],
    ids=["nul-run", "long-agent", "nul-gateway", "long-utf8-run", "nul-tool", "long-tool"],
)
def test_names_sql_cannot_store_are_refused_on_both_sides(event: AgentEvent) -> None:
    """PostgreSQL refuses NUL in text and cannot index long values: such a name would stall
    the audit trail, so the gateway's encoder refuses it and the worker dead-letters it."""
    with pytest.raises(EncodeError, match="NUL|byte limit"):
        encode_event(event)
    with pytest.raises(InvalidDatumError, match="NUL|byte limit"):
        decode_event(encode_event(event, check_names=False))


def test_names_at_the_limit_and_odd_characters_are_fine() -> None:
    event = ToolCall(replace(ENV, run_id="é" * (NAME_MAX_BYTES // 2)), "a\nb'; drop", "{}")
    assert decode_event(encode_event(event)) == event


# -------------------------------------------------------------------- property tests

longs = st.integers(min_value=LONG_MIN, max_value=LONG_MAX)
texts = st.text()
opt_texts = st.none() | st.text()
# Run/agent/gateway/tool names: anything UTF-8 can carry but NUL, within the name limit (both
# tested apart). Hypothesis drops its default surrogate exclusion once characters() has
# arguments, so say codec="utf-8": a lone surrogate cannot be encoded (EncodeError, tested).
names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=200)
envelopes = st.builds(Envelope, names.filter(bool), names, names, longs, longs)
events = st.one_of(
    st.builds(ToolCall, envelopes, names, texts, opt_texts),
    st.builds(ToolResult, envelopes, names, opt_texts, opt_texts, opt_texts, opt_texts),
    st.builds(CompactionRetry, envelopes, texts),
    st.builds(RunStarted, envelopes),
    st.builds(RunEnded, envelopes, texts),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)
decisions = st.builds(
    Decision,
    run_id=st.text(min_size=1),
    agent_id=texts,
    gateway_id=texts,
    seq=longs,
    event_time=longs,
    action=st.sampled_from(Action),
    detector=texts,
    severity=st.sampled_from(["warning", "critical"]),
    count=longs,
    tool_name=texts,
    reason=texts,
    args_hash=texts,
    result_hash=texts,
    paired_tool_name=texts,
    error_code=texts,
    config_version=texts,
    enforced=st.booleans(),
    extra=st.dictionaries(st.text(), json_values, max_size=5),
)
PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(events)
def test_property_event_round_trip(event: AgentEvent) -> None:
    assert decode_event(encode_event(event)) == event


PLAIN_EVENT = plain_avro_schema(schema_dict("AgentEvent"))
PLAIN_DECISION = plain_avro_schema(schema_dict("Decision"))


@PROPERTY
@given(events)
def test_property_event_bytes_cross_with_the_avro_package(event: AgentEvent) -> None:
    """fastavro's bytes read back with avro's DatumReader, and avro's DatumWriter writes the very
    same bytes, which the codec decodes back to the event."""
    data = encode_event(event)
    header, payload = data[:10], data[10:]
    body = {f.name: getattr(event, f.name) for f in fields(event) if f.name != "envelope"}
    envelope = {f.name: getattr(event.envelope, f.name) for f in fields(Envelope)}
    assert avro_decode(PLAIN_EVENT, payload) == {**envelope, "body": body}
    kind = f"loopguard.{type(event).__name__}"
    from_avro = avro_encode(PLAIN_EVENT, {**envelope, "body": (kind, body)})
    assert from_avro == payload
    assert decode_event(header + from_avro) == event


@PROPERTY
@given(decisions)
def test_property_decision_bytes_cross_with_the_avro_package(decision: Decision) -> None:
    data = encode_decision(decision)
    datum = avro_decode(PLAIN_DECISION, data[10:])
    assert datum["decision_id"] == decision.decision_id
    extra = {key: json.loads(text) for key, text in datum.pop("extra").items()}
    del datum["decision_id"]
    assert Decision(**{**datum, "action": Action(datum["action"])}, extra=extra) == decision
    from_avro = avro_encode(PLAIN_DECISION, avro_decode(PLAIN_DECISION, data[10:]))
    assert from_avro == data[10:]
    assert decode_decision(data[:10] + from_avro) == decision


@PROPERTY
@given(decisions)
def test_property_decision_round_trip(decision: Decision) -> None:
    assert decode_decision(encode_decision(decision)) == decision


def assert_event_or_codec_error(data: bytes, registry: SchemaRegistry | None = None) -> None:
    try:
        result = decode_event(data, registry)
    except CodecError:
        return
    assert isinstance(result, tuple(EVENT_KINDS.values()))


@PROPERTY
@given(st.binary(max_size=200))
def test_property_arbitrary_bytes_decode_or_raise_codec_error(data: bytes) -> None:
    assert_event_or_codec_error(data)


@PROPERTY
@given(st.binary(max_size=200))
def test_property_garbage_after_a_valid_header(tail: bytes) -> None:
    assert_event_or_codec_error(MARKER + event_schema_fingerprint() + tail)


EVOLVED = SchemaRegistry()
EVOLVED_FINGERPRINT = EVOLVED.register(newer_event_schema())


@PROPERTY
@given(st.binary(max_size=200))
def test_property_garbage_through_the_resolving_reader(tail: bytes) -> None:
    assert_event_or_codec_error(MARKER + EVOLVED_FINGERPRINT + tail, EVOLVED)
    for decode in (decode_decision, decode_dead_letter):
        for fingerprint in avro_codec.default_registry().fingerprints():
            with contextlib.suppress(CodecError):
                decode(MARKER + fingerprint + tail)


@PROPERTY
@given(events, st.data())
def test_property_mutated_messages_decode_or_raise_codec_error(
    event: AgentEvent, data: st.DataObject
) -> None:
    message = bytearray(encode_event(event))
    index = data.draw(st.integers(min_value=0, max_value=len(message) - 1))
    message[index] = data.draw(st.integers(min_value=0, max_value=255))
    assert_event_or_codec_error(bytes(message))


# ------------------------------------------------------------------ events from flat dicts


def test_event_dicts_are_checked_as_the_encoder_checks_events() -> None:
    for event in SAMPLE_EVENTS:
        assert avro_codec.event_from_dict_checked(event_to_dict(event)) == event
    tool_call = event_to_dict(SAMPLE_EVENTS[0])
    cases = {
        "unknown event kind 'teleport'": {**tool_call, "kind": "teleport"},
        "missing field 'seq'": {k: v for k, v in tool_call.items() if k != "seq"},
        "AgentEvent.seq must be an int": {**tool_call, "seq": True},
        "AgentEvent.event_time must be an int": {**tool_call, "event_time": None},
        "ToolCall.tool_name must be a str": {**tool_call, "tool_name": 5},
        "empty run_id": {**tool_call, "run_id": ""},
        "contains a NUL character": {**tool_call, "tool_name": "ex\x00ec"},
    }
    for message, data in cases.items():
        with pytest.raises(CodecError, match=message):
            avro_codec.event_from_dict_checked(data)
