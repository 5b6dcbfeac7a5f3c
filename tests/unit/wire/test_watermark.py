"""RunWatermark and RunWatermarks on the control topic: round trip, and told apart from
decisions."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from streams.core.events import Action, Decision
from streams.wire.avro import (
    SCHEMA_DIR,
    RunWatermark,
    RunWatermarks,
    control_messages,
    decode_control,
    decode_watermark,
    decode_watermarks,
    encode_decision,
    encode_watermark,
    encode_watermark_chunks,
    encode_watermarks,
)
from streams.wire.errors import CodecError, MissingRunIdError, PayloadTooLargeError

MARK = RunWatermark(
    run_id="run-ü",
    agent_id="a",
    gateway_id="gw",
    seq=41,
    event_time=1_700_000_000_123,
    status="aborted",
    event_count=39,
)


def test_round_trip_and_control_dispatch() -> None:
    data = encode_watermark(MARK)
    assert decode_watermark(data) == MARK
    assert decode_control(data) == MARK
    decision = Decision(
        run_id="r",
        agent_id="a",
        gateway_id="g",
        seq=3,
        event_time=1,
        action=Action.BLOCK,
        detector="generic_repeat",
        severity="critical",
        count=20,
        tool_name="read",
        reason="x",
    )
    assert decode_control(encode_decision(decision)) == decision


def test_a_watermark_needs_a_run_id_and_garbage_is_a_codec_error() -> None:
    with pytest.raises(MissingRunIdError):
        encode_watermark(RunWatermark(run_id="", agent_id="a", gateway_id="g", seq=1, event_time=0))
    data = encode_watermark(MARK)
    with pytest.raises(CodecError):
        decode_control(data[:12])
    with pytest.raises(CodecError):  # a tombstone on the control topic
        decode_control(None)  # type: ignore[arg-type]


def test_a_batchs_watermarks_round_trip_in_one_record() -> None:
    marks = [MARK, replace(MARK, run_id="run-2", seq=7, input_tokens=120, cost_usd=0.25)]
    data = encode_watermarks(marks)
    assert decode_watermarks(data) == RunWatermarks(tuple(marks))
    assert decode_control(data) == RunWatermarks(tuple(marks))
    assert control_messages(data) == tuple(marks)
    assert control_messages(encode_watermark(MARK)) == (MARK,)
    with pytest.raises(MissingRunIdError):
        encode_watermarks([MARK, replace(MARK, run_id="")])


def test_watermarks_split_into_records_that_fit_the_message_limit() -> None:
    marks = [replace(MARK, run_id=f"run-{n:04d}", seq=n + 1) for n in range(300)]
    whole = len(encode_watermarks(marks))
    limit = whole // 5
    chunks = encode_watermark_chunks(marks, max_size=limit)
    assert len(chunks) > 5 and all(len(chunk) <= limit for chunk in chunks)
    assert [m for chunk in chunks for m in control_messages(chunk)] == marks  # in order
    with pytest.raises(PayloadTooLargeError):  # one mark larger than a record can be
        encode_watermark_chunks([replace(MARK, run_id="r" * 500)], max_size=200)


def test_the_batch_schema_holds_the_run_watermark_schema_field_for_field() -> None:
    """RunWatermarks.avsc defines RunWatermark inline (a schema that stands alone): the copy
    must be the record gateways read one by one."""
    single = json.loads((SCHEMA_DIR / "RunWatermark.avsc").read_text())
    batch = json.loads((SCHEMA_DIR / "RunWatermarks.avsc").read_text())
    (field,) = batch["fields"]
    inline = field["type"]["items"]
    assert inline["name"] == single["name"] and inline["namespace"] == single["namespace"]
    assert inline["fields"] == single["fields"]
