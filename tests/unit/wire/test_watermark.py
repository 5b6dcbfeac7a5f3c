"""RunWatermark on the control topic: round trip, and told apart from decisions."""

from __future__ import annotations

import pytest

from streams.core.events import Action, Decision
from streams.wire.avro import (
    RunWatermark,
    decode_control,
    decode_watermark,
    encode_decision,
    encode_watermark,
)
from streams.wire.errors import CodecError, MissingRunIdError

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
