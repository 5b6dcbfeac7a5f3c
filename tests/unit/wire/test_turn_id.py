"""Issue 44's optional ``turn_id`` (ToolCall) crosses schema versions both ways: a worker reads
the events of gateways on the version before it (no turn: today's verdicts), and a worker on
that version reads ours (it drops the turn). The reference ``avro`` package plays the other
side; ``schemas/previous/AgentEvent.v3.avsc`` is the version shipped before the field."""

from __future__ import annotations

import json

import pytest
from avro_reference import avro_decode, avro_write, plain_avro_schema

from streams.core.events import Envelope, ToolCall, event_from_dict, event_to_dict
from streams.wire.avro import (
    SCHEMA_DIR,
    EncodeError,
    InvalidDatumError,
    SchemaRegistry,
    decode_event,
    encode_event,
    event_from_dict_checked,
)

BEFORE = SCHEMA_DIR / "previous" / "AgentEvent.v3.avsc"  # what gateways ran before issue 44
ENV = Envelope("run-7", "agent-1", "gw-1", 3, 1_700_000, session_id="s-1", chain_id="c-1")


def test_turn_id_round_trips_and_is_optional() -> None:
    call = ToolCall(ENV, "web_fetch", '{"url": "https://a"}', "c-9", 10, 2, 0.5, turn_id="m-1")
    assert decode_event(encode_event(call)) == call
    plain = ToolCall(ENV, "read", "{}")
    assert decode_event(encode_event(plain)).turn_id is None
    # the flat form (export files, held events in a run's state) leaves an unset one out
    assert "turn_id" not in event_to_dict(plain)
    assert event_to_dict(call)["turn_id"] == "m-1"
    assert event_from_dict(event_to_dict(call)) == call
    assert event_from_dict_checked(event_to_dict(call)) == call


def test_the_previous_version_is_the_shipped_one_without_the_turn() -> None:
    body = next(f for f in json.loads(BEFORE.read_text())["fields"] if f["name"] == "body")
    call = next(b for b in body["type"] if b["name"] == "ToolCall")
    names = [f["name"] for f in call["fields"]]
    assert names[-1] == "cost_usd" and "turn_id" not in names


def test_a_gateway_on_the_previous_schema_sends_no_turn() -> None:
    """Known without a schemas-topic lookup: every registry holds the previous versions."""
    datum = {"run_id": "r", "agent_id": "a", "gateway_id": "g", "seq": 1, "event_time": 2}
    body = {
        "tool_name": "ls",
        "args_json": "{}",
        "tool_call_id": None,
        "input_tokens": 7,
        "output_tokens": None,
        "cost_usd": None,
    }
    event = decode_event(avro_write(BEFORE.read_text(), {**datum, "body": body}, "ToolCall"))
    assert isinstance(event, ToolCall) and event.turn_id is None and event.input_tokens == 7


def test_a_worker_on_the_previous_schema_drops_the_turn() -> None:
    message = encode_event(ToolCall(ENV, "ls", "{}", "c", turn_id="m-1"))
    writer = plain_avro_schema(json.loads((SCHEMA_DIR / "AgentEvent.avsc").read_text()))
    read = avro_decode(writer, message[10:], plain_avro_schema(json.loads(BEFORE.read_text())))
    assert read["body"]["tool_name"] == "ls" and "turn_id" not in read["body"]
    assert read["chain_id"] == "c-1"
    # such a worker resolves our writer schema as it always did: by its fingerprint
    registry = SchemaRegistry([BEFORE.read_text(), (SCHEMA_DIR / "AgentEvent.avsc").read_text()])
    assert decode_event(message, registry).turn_id == "m-1"


def test_a_turn_id_follows_the_name_rules() -> None:
    with pytest.raises(EncodeError, match="ToolCall.turn_id contains a NUL character"):
        encode_event(ToolCall(ENV, "ls", "{}", turn_id="m\x00"))
    with pytest.raises(EncodeError, match="ToolCall.turn_id is 1025 bytes long"):
        encode_event(ToolCall(ENV, "ls", "{}", turn_id="t" * 1025))
    hostile = encode_event(ToolCall(ENV, "ls", "{}", turn_id="t" * 1025), check_names=False)
    with pytest.raises(InvalidDatumError, match="turn_id"):
        decode_event(hostile)
    assert decode_event(encode_event(ToolCall(ENV, "ls", "{}", turn_id="ü" * 512))).turn_id
