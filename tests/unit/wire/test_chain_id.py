"""Issue 28's optional ``chain_id`` (envelope) crosses schema versions both ways: the worker
reads events of gateways on the version before it (no chain), a worker on that version reads
ours (it ignores the chain). The reference ``avro`` package plays the other side."""

from __future__ import annotations

import json

from avro_reference import avro_decode, avro_write, plain_avro_schema

from streams.core.events import Envelope, ToolCall
from streams.wire.avro import SCHEMA_DIR, SchemaRegistry, decode_event, encode_event

SHIPPED = SCHEMA_DIR / "previous" / "AgentEvent.v2.avsc"  # what gateways run before issue 28


def test_chain_id_round_trips_and_is_optional() -> None:
    chained = ToolCall(Envelope("r", "a", "g", 1, 2, chain_id="chain-7"), "sessions_send", "{}")
    assert decode_event(encode_event(chained)).envelope.chain_id == "chain-7"
    plain = ToolCall(Envelope("r", "a", "g", 1, 2), "ls", "{}")
    assert decode_event(encode_event(plain)).envelope.chain_id is None


def test_a_gateway_on_the_shipped_schema_sends_no_chain() -> None:
    shipped = SHIPPED.read_text()
    registry = SchemaRegistry()
    registry.register(shipped)
    datum = {"run_id": "r", "agent_id": "a", "gateway_id": "g", "seq": 1, "event_time": 2}
    body = {"tool_name": "ls", "args_json": "{}", "tool_call_id": None}
    event = decode_event(avro_write(shipped, {**datum, "body": body}, "ToolCall"), registry)
    assert event.envelope.chain_id is None and event.envelope.run_id == "r"


def test_a_worker_on_the_shipped_schema_ignores_the_chain() -> None:
    message = encode_event(ToolCall(Envelope("r", "a", "g", 1, 2, chain_id="c"), "ls", "{}"))
    writer = plain_avro_schema(json.loads((SCHEMA_DIR / "AgentEvent.avsc").read_text()))
    read = avro_decode(writer, message[10:], plain_avro_schema(json.loads(SHIPPED.read_text())))
    assert read["run_id"] == "r" and "chain_id" not in read
