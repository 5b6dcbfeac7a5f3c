"""Issue 28's usage fields cross schema versions both ways: a newer worker reads an older
gateway's events (no usage), an older worker reads a newer gateway's (it drops the usage), and
run watermarks stay readable by gateways from before the fields. The previous versions are the
files in ``schemas/previous``, exactly as they were shipped."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from avro_reference import avro_decode, avro_write, plain_avro_schema

from streams.core.events import Envelope, RunEnded, ToolCall
from streams.wire.avro import (
    SCHEMA_DIR,
    EncodeError,
    RunWatermark,
    SchemaRegistry,
    decode_control,
    decode_event,
    decode_watermark,
    encode_event,
    encode_watermark,
)
from streams.wire.schema_registry import parse_schema_text, previous_schemas

ENV = Envelope("run-7", "agent-1", "gw-1", 3, 1_700_000, session_id="s-1")
OLD_EVENT = (SCHEMA_DIR / "previous" / "AgentEvent.v2.avsc").read_text()
NEW_EVENT = (SCHEMA_DIR / "AgentEvent.avsc").read_text()
OLD_MARK = (SCHEMA_DIR / "previous" / "RunWatermark.v3.avsc").read_text()


def test_the_previous_versions_are_what_was_shipped_before_the_usage_fields() -> None:
    body = next(f for f in json.loads(OLD_EVENT)["fields"] if f["name"] == "body")
    call = next(b for b in body["type"] if b["name"] == "ToolCall")
    assert [f["name"] for f in call["fields"]] == ["tool_name", "args_json", "tool_call_id"]
    assert [f["name"] for f in json.loads(OLD_MARK)["fields"]][-1] == "event_count"
    # AgentEvent.v3: the version with the usage fields, before issue 44's turn id
    assert set(previous_schemas()) == {"AgentEvent.v2", "AgentEvent.v3", "RunWatermark.v3"}


def test_a_newer_worker_reads_an_older_gateways_events_without_usage() -> None:
    datum = {
        "run_id": "r",
        "agent_id": "a",
        "gateway_id": "g",
        "seq": 2,
        "event_time": 5,
        "session_id": None,
    }
    call = avro_write(
        OLD_EVENT,
        {**datum, "body": {"tool_name": "ls", "args_json": "{}", "tool_call_id": "c"}},
        "ToolCall",
    )
    # known without a schemas-topic lookup: every registry holds the previous versions
    event = decode_event(call, SchemaRegistry())
    assert isinstance(event, ToolCall) and event.tool_name == "ls"
    assert (event.input_tokens, event.output_tokens, event.cost_usd) == (None, None, None)
    ended = decode_event(avro_write(OLD_EVENT, {**datum, "body": {"status": "x"}}, "RunEnded"))
    assert isinstance(ended, RunEnded) and ended.input_tokens is None


def test_an_older_worker_reads_a_newer_gateways_events_and_drops_the_usage() -> None:
    """What a worker still on the previous schema reads (it resolves our writer schema, which
    the gateway announced on the schemas topic, onto its own)."""
    event = ToolCall(ENV, "exec", "{}", "c-1", input_tokens=9_000, output_tokens=12, cost_usd=0.5)
    message = encode_event(event)
    read = avro_decode(
        plain_avro_schema(json.loads(NEW_EVENT)),
        message[10:],
        plain_avro_schema(json.loads(OLD_EVENT)),
    )
    assert read["body"] == {"tool_name": "exec", "args_json": "{}", "tool_call_id": "c-1"}
    assert read["run_id"] == "run-7" and read["session_id"] == "s-1"
    # ... with the same fingerprint machinery as ever: the registry resolves it by fingerprint
    old_registry = SchemaRegistry([OLD_EVENT, NEW_EVENT])
    assert parse_schema_text(NEW_EVENT).fingerprint in old_registry


def test_usage_round_trips_and_bad_values_are_refused() -> None:
    call = ToolCall(ENV, "exec", "{}", None, input_tokens=2**40, output_tokens=0, cost_usd=1.5)
    assert decode_event(encode_event(call)) == call
    ended = RunEnded(ENV, "aborted", input_tokens=1, output_tokens=2, cost_usd=None)
    assert decode_event(encode_event(ended)) == ended
    for bad in ({"input_tokens": -1}, {"cost_usd": float("inf")}, {"cost_usd": -0.5}):
        with pytest.raises(EncodeError):
            encode_event(replace(call, **bad))


def mark(**usage: int | float) -> RunWatermark:
    return RunWatermark(
        run_id="run-7",
        agent_id="a",
        gateway_id="g",
        seq=4,
        event_time=9,
        status="active",
        event_count=4,
        **usage,
    )


def test_a_watermark_without_usage_is_written_in_the_version_older_gateways_read() -> None:
    plain = encode_watermark(mark())
    assert plain[2:10] == parse_schema_text(OLD_MARK).fingerprint
    # an older gateway knows only that version: it reads it as it always did
    read = avro_decode(plain_avro_schema(json.loads(OLD_MARK)), plain[10:])
    assert read["seq"] == 4 and read["event_count"] == 4
    assert decode_watermark(plain) == mark()
    assert decode_control(plain) == mark()


def test_a_watermark_with_usage_carries_it() -> None:
    rich = mark(input_tokens=100, output_tokens=5, cost_usd=0.25, loop_tokens=50, saved_tokens=7)
    data = encode_watermark(rich)
    assert (
        data[2:10] == parse_schema_text((SCHEMA_DIR / "RunWatermark.avsc").read_text()).fingerprint
    )
    assert decode_control(data) == rich
