"""The ``invalid`` cases of clients/vectors/python.json: messages the Python decoders refuse,
each with the error class (and message) another client must answer with too.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro

from streams.core import events as ev
from streams.wire import avro as codec

# The version watermarks without usage are written in (the invalid vectors are such ones).
WATERMARK_SCHEMA = (Path(codec.SCHEMA_DIR) / "previous" / "RunWatermark.v3.avsc").read_text(
    encoding="utf-8"
)


def watermark_datum(values: dict[str, Any]) -> bytes:
    """A RunWatermark datum written without the codec's checks (for the invalid vectors)."""
    schema = fastavro.parse_schema(strip_logical(json.loads(WATERMARK_SCHEMA)))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, values)
    return out.getvalue()


def make_invalid(t0: int) -> list[dict[str, Any]]:
    """Messages Python's decoders refuse, with the error class each one raises; ``t0``:
    the vectors' event time."""
    good_event = codec.encode_event(ev.RunStarted(ev.Envelope("run-x", "a", "g", 1, t0)))
    tool_call = codec.encode_event(
        ev.ToolCall(ev.Envelope("run-x", "a", "g", 2, t0), "exec", "{}", None)
    )
    decision = codec.encode_decision(
        ev.Decision("run-x", "a", "g", 1, t0, ev.Action.WARN, "d", "warning", 1, "exec", "why")
    )

    def raw_event(datum: dict[str, Any]) -> bytes:
        schema = json.loads(
            (Path(codec.SCHEMA_DIR) / "AgentEvent.avsc").read_text(encoding="utf-8")
        )
        out = io.BytesIO()
        out.write(b"\xc3\x01" + codec.event_schema_fingerprint())
        fastavro.schemaless_writer(out, fastavro.parse_schema(strip_logical(schema)), datum)
        return out.getvalue()

    empty_run = raw_event(
        {
            "run_id": "",
            "agent_id": "a",
            "gateway_id": "g",
            "seq": 1,
            "event_time": t0,
            "body": ("loopguard.RunStarted", {}),
        }
    )
    nul_name = codec.encode_event(
        ev.ToolCall(ev.Envelope("run-x", "a", "g", 2, t0), "ex\x00ec", "{}", None),
        check_names=False,
    )
    long_name = codec.encode_event(
        ev.ToolCall(ev.Envelope("run-x", "a", "g", 2, t0), "t" * 1025, "{}", None),
        check_names=False,
    )
    # run_id "run-x" is 5 bytes: length byte 0x0a at 10, text at 11..15; make it invalid UTF-8.
    bad_utf8 = bytearray(good_event)
    bad_utf8[11:13] = b"\xff\xfe"
    # body union index: after run_id, agent_id, gateway_id, seq, event_time.
    header_len = 10 + 6 + 2 + 2  # run_id "run-x", agent "a", gateway "g" (length byte + text)
    seq_len = len(zigzag(1))
    time_len = len(zigzag(t0))
    union_at = header_len + seq_len + time_len
    bad_union = bytearray(good_event)
    assert bad_union[union_at] == 2 * 3, "RunStarted is branch 3"
    bad_union[union_at] = 2 * 9
    # Decision.action enum index: after run_id "run-x", "a", "g", seq 1, event_time.
    action_at = 10 + 6 + 2 + 2 + seq_len + time_len
    bad_enum = bytearray(decision)
    assert bad_enum[action_at] == 0, "warn is symbol 0"
    bad_enum[action_at] = 2 * 7
    unknown_fp = b"\xc3\x01" + b"\x00" * 8 + good_event[10:]
    cases = [
        ("bad_marker", b"\xc3\x02" + good_event[2:], "decode_event"),
        ("not_avro_json", b'{"run_id": "x"}', "decode_event"),
        ("empty", b"", "decode_event"),
        ("header_truncated", good_event[:7], "decode_event"),
        ("datum_truncated", tool_call[:-3], "decode_event"),
        ("trailing_bytes", good_event + b"\x00", "decode_event"),
        ("unknown_fingerprint", unknown_fp, "decode_event"),
        ("decision_on_events_decoder", decision, "decode_event"),
        ("event_on_decision_decoder", good_event, "decode_decision"),
        ("invalid_utf8", bytes(bad_utf8), "decode_event"),
        ("union_index_out_of_range", bytes(bad_union), "decode_event"),
        ("enum_index_out_of_range", bytes(bad_enum), "decode_decision"),
        ("empty_run_id", empty_run, "decode_event"),
        ("nul_in_tool_name", nul_name, "decode_event"),
        ("tool_name_too_long", long_name, "decode_event"),
    ]
    wm_fields = {"run_id": "run-x", "agent_id": "a", "gateway_id": "g", "seq": 1, "event_time": t0}
    wm_good = codec.encode_watermark(codec.RunWatermark(**wm_fields))
    wm_empty_datum = {**wm_fields, "run_id": "", "status": "active", "event_count": 0}
    wm_empty = wm_good[:10] + watermark_datum(wm_empty_datum)
    cases += [
        ("watermark_empty_run_id", wm_empty, "decode_watermark"),
        ("watermark_truncated", wm_good[:-2], "decode_watermark"),
        ("decision_on_watermark_decoder", decision, "decode_watermark"),
    ]
    out = []
    for name, data, decoder in cases:
        try:
            getattr(codec, decoder)(data)
        except codec.CodecError as exc:
            error = type(exc).__name__
            message = str(exc)
        else:
            raise AssertionError(f"invalid vector {name} decoded")
        out.append(
            {
                "name": name,
                "decoder": decoder,
                "hex": data.hex(),
                "error": error,
                "message": message,
            }
        )
    return out


def zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def strip_logical(node: Any) -> Any:
    if isinstance(node, list):
        return [strip_logical(n) for n in node]
    if isinstance(node, dict):
        if node.get("type") in ("long", "int", "string", "bytes") and "logicalType" in node:
            return node["type"]
        return {k: strip_logical(v) for k, v in node.items() if k != "logicalType"}
    return node
