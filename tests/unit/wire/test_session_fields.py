"""Issue 17's optional ``session_id`` (envelope) and ``RunStarted.trigger`` cross schema
versions both ways: a newer worker reads an older gateway's events (defaults: no session, no
trigger), an older worker reads a newer gateway's (it ignores both). The reference ``avro``
package plays the other side, with the schema as it was before the fields were added.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from avro_reference import avro_decode, avro_write, body_branch, plain_avro_schema

from streams.core.events import Envelope, RunStarted, ToolCall, event_from_dict, event_to_dict
from streams.wire.avro import (
    SCHEMA_DIR,
    EncodeError,
    SchemaRegistry,
    decode_event,
    encode_event,
    event_from_dict_checked,
)

ENV = Envelope("run-2", "agent-1", "gw-1", 1, 1_700_000, session_id="sess-9")


def older_event_schema() -> dict[str, Any]:
    """AgentEvent as it was before issue 17: no session_id, RunStarted an empty record."""
    # the version issue 17 shipped (before issue 28's usage fields), less its fields
    schema = json.loads((SCHEMA_DIR / "previous" / "AgentEvent.v2.avsc").read_text())
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "session_id"]
    body_branch(schema, "RunStarted")["fields"] = []
    return schema


def test_the_older_schema_is_the_one_shipped_before():
    fields = [f["name"] for f in older_event_schema()["fields"]]
    assert fields == ["run_id", "agent_id", "gateway_id", "seq", "event_time", "body"]


def test_newer_worker_reads_an_older_gateways_events():
    old = older_event_schema()
    registry = SchemaRegistry()
    registry.register(json.dumps(old))
    for kind, body in (("RunStarted", {}), ("ToolCall", {"tool_name": "ls", "args_json": "{}"})):
        datum = {"run_id": "r", "agent_id": "a", "gateway_id": "g", "seq": 1, "event_time": 2}
        values = {**body, "tool_call_id": None} if body else body
        message = avro_write(json.dumps(old), {**datum, "body": values}, kind)
        event = decode_event(message, registry)
        assert event.envelope == Envelope("r", "a", "g", 1, 2)
        assert event.envelope.session_id is None
        if isinstance(event, RunStarted):
            assert event.trigger is None


def read_as_older(message: bytes) -> dict[str, Any]:
    """What a worker still on the older schema reads from our bytes (schema resolution)."""
    writer = plain_avro_schema(json.loads((SCHEMA_DIR / "AgentEvent.avsc").read_text()))
    return avro_decode(writer, message[10:], plain_avro_schema(older_event_schema()))


def test_older_worker_reads_a_newer_gateways_events():
    started = read_as_older(encode_event(RunStarted(ENV, trigger="compaction")))
    assert started["run_id"] == "run-2" and "session_id" not in started
    assert started["body"] == {}
    call = read_as_older(encode_event(ToolCall(ENV, "grep", '{"q": 1}', "c1")))
    assert call["body"] == {"tool_name": "grep", "args_json": '{"q": 1}', "tool_call_id": "c1"}


def test_session_id_and_trigger_round_trip_and_stay_optional():
    for event in (
        RunStarted(ENV, trigger="heartbeat"),
        RunStarted(ENV),
        ToolCall(ENV, "ls"),
        ToolCall(Envelope("r", "a", "g", 3, 4), "ls"),
    ):
        assert decode_event(encode_event(event)) == event
        flat = event_to_dict(event)
        assert event_from_dict(flat) == event == event_from_dict_checked(flat)
    # unset, neither appears in the flat form (export files and stored states as before)
    assert "session_id" not in event_to_dict(ToolCall(Envelope("r", "a", "g", 3, 4), "ls"))
    assert "trigger" not in event_to_dict(RunStarted(ENV))
    assert event_to_dict(RunStarted(ENV, "cron"))["session_id"] == "sess-9"


def test_a_session_id_the_audit_trail_could_not_store_is_refused():
    with pytest.raises(EncodeError, match=r"RunStarted\.session_id contains a NUL"):
        encode_event(RunStarted(Envelope("r", "a", "g", 1, 2, session_id="a\x00b")))
