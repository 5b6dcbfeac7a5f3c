#!/usr/bin/env python3
"""Write clients/vectors/python.json: messages encoded by the Python codec, for other clients.

The TypeScript client's tests (clients/typescript) decode every message here, compare the
fields, and encode the fields again byte for byte; they also check its Python-compatible JSON
text against ``json.dumps`` on the ``gateway_json`` cases and refuse the ``invalid`` messages
with the same error class as Python.

Run with the project's virtualenv (the editable install provides ``streams``)::

    .venv/bin/python clients/vectors/make_python_vectors.py [--out PATH]

``tests/unit/gateway/test_cross_language_vectors.py`` fails when python.json is not what this
script writes, and decodes ``typescript.json`` (written by ``npm run vectors`` in
clients/typescript) with the Python codec.

File format (everything JSON-safe):
- Avro longs (seq, event_time, count) are decimal strings, so 64-bit values survive JS parsers.
- ``hex``: the whole single-object message (``c301`` + fingerprint + datum).
- ``watermark_batches``: RunWatermarks records (issue 24), ``watermarks`` the fields of each
  of their watermarks in order.
- ``gateway_json`` values are tagged trees (``{"int": "7"}``, ``{"float": "0.1"}``,
  ``{"str": ...}``, ``{"bool": true}``, ``{"null": null}``, ``{"list": [...]}``,
  ``{"dict": [[key, value], ...]}``) so floats, big ints and key order reach the other side
  exactly; ``python`` is ``json.dumps(value, ensure_ascii=False)`` and ``ts_expected``, where
  present, is what a JS client necessarily writes instead (see the case's ``why``).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import fastavro

from streams.core import events as ev
from streams.wire import avro as codec

HERE = Path(__file__).resolve().parent
CODEC_MODULE = codec.__name__
# The version watermarks without usage are written in (the invalid vectors are such ones).
WATERMARK_SCHEMA = (Path(codec.SCHEMA_DIR) / "previous" / "RunWatermark.v3.avsc").read_text(
    encoding="utf-8"
)


def watermark_datum(values: dict[str, Any]) -> bytes:
    """A RunWatermark datum written without the codec's checks (for the invalid vectors)."""
    schema = fastavro.parse_schema(_strip_logical(json.loads(WATERMARK_SCHEMA)))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, values)
    return out.getvalue()


# ------------------------------------------------------------------------------ helpers


def longs(fields: dict[str, Any], names: tuple[str, ...] = ("seq", "event_time", "count")) -> dict:
    return {k: (str(v) if k in names and isinstance(v, int) else v) for k, v in fields.items()}


def event_fields(event: Any) -> dict[str, Any]:
    return longs(ev.event_to_dict(event))


def tag(value: Any) -> Any:
    """A Python JSON value as a tagged tree the JS side rebuilds exactly."""
    if value is None:
        return {"null": None}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": str(value)}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, list | tuple):
        return {"list": [tag(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[k, tag(v)] for k, v in value.items()]}
    raise TypeError(type(value))


# ------------------------------------------------------------------------------ the cases

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch ms
LOOP_VETO_RESULT = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}


def dumps(value: Any) -> str:
    """What the gateway client writes for args/results."""
    return json.dumps(value, ensure_ascii=False)


def make_events() -> list[tuple[str, Any]]:
    E = ev.Envelope

    def env(seq: int, run_id: str = "run-1", agent: str = "agent-a", gw: str = "gw-py", t: int = 0):
        return E(run_id, agent, gw, seq, T0 + seq if t == 0 else t)

    nested = {
        "path": "/tmp/日本語 ✓",
        "emoji": "🦀 crab",
        "nested": {"list": [1, 2.5, None, True, False, {"deep": []}], "empty": {}},
        "big": 2**64,
        "neg": -(2**63),
        "tiny": 1e-7,
        "ctrl": 'a\nb\t"c"\\ \x00\x1f\x7f \u2028',
    }
    return [
        ("tool_call", ev.ToolCall(env(2), "exec", dumps({"command": "make test"}), "call_1")),
        ("tool_call_nested_args_no_id", ev.ToolCall(env(3), "write", dumps(nested), None)),
        ("tool_call_default_args", ev.ToolCall(env(4), "noop")),
        ("tool_call_null_args", ev.ToolCall(env(5), "noop", dumps(None))),
        (
            "tool_result_loop_veto",
            ev.ToolResult(
                env(6),
                "exec",
                dumps({"command": "make test"}),
                dumps(LOOP_VETO_RESULT),
                None,
                "call_1",
            ),
        ),
        (
            "tool_result_error_only",
            ev.ToolResult(env(7), "read", None, None, "ENOENT: no such file ✗", None),
        ),
        ("tool_result_all_null", ev.ToolResult(env(8), "read")),
        (
            "tool_result_unicode_result",
            ev.ToolResult(
                env(9),
                "fetch",
                dumps({"url": "https://example.invalid/ü"}),
                dumps({"text": "ß" * 300 + "🦀" * 50}),
                None,
                "c-9",
            ),
        ),
        ("compaction_default", ev.CompactionRetry(env(10))),
        ("compaction_manual", ev.CompactionRetry(env(11), "manual")),
        ("run_started", ev.RunStarted(env(1))),
        ("run_ended_default", ev.RunEnded(env(12))),
        ("run_ended_aborted", ev.RunEnded(env(13), "aborted")),
        ("tool_call_with_usage", ev.ToolCall(env(16), "exec", "{}", "c-u", 12_345, 678, 0.0421)),
        ("tool_call_tokens_only", ev.ToolCall(env(17), "exec", "{}", None, 2**40, 0)),
        ("run_ended_with_usage", ev.RunEnded(env(18), "completed", 900, 40, 0.5)),
        # issue 44: the assistant turn that asked for the call
        ("tool_call_with_turn", ev.ToolCall(env(19), "web_fetch", "{}", "c-t", turn_id="msg-ü-1")),
        ("big_seq_negative_time", ev.RunStarted(E("run-big", "a", "g", 2**63 - 1, -(2**63)))),
        ("zero_seq_zero_time", ev.RunStarted(E("run-zero", "a", "g", 0, 0))),
        ("unsafe_but_common_ms", ev.RunStarted(E("run-safe-max", "a", "g", 2**53 - 1, 2**53 + 1))),
        ("empty_agent_and_gateway", ev.ToolCall(E("run-empty", "", "", 1, T0), "", "{}", "")),
        (
            "unicode_ids",
            ev.ToolCall(
                E("run-ü-🦀", "agént", "gw-日本", 2, T0), "búsqueda", dumps(["ü", "🦀"]), "id-✓"
            ),
        ),
        ("name_at_limit", ev.ToolCall(env(14), "t" * 1024, "{}", None)),
        ("name_multibyte_at_limit", ev.ToolCall(env(15), "ü" * 512, "{}", None)),
        # issue 17: the session a run belongs to and what started the run
        ("session_run_started", ev.RunStarted(E("run-s2", "a", "g", 1, T0, "s-1"), "compaction")),
        ("session_tool_call", ev.ToolCall(E("run-s2", "a", "g", 2, T0, "s-ü-1"), "ls", "{}", "c")),
        ("run_started_heartbeat", ev.RunStarted(env(16), "heartbeat")),
    ]


A = ev.Action
DECISION_BASE = dict(
    run_id="run-1", agent_id="agent-a", gateway_id="gw-py", event_time=T0, severity="warning"
)
DECISIONS = [  # (name, Decision fields over DECISION_BASE)
    (
        "warn_minimal",
        dict(
            seq=3,
            action=A.WARN,
            detector="generic_repeat",
            count=10,
            tool_name="exec",
            reason="exec repeated 10 times",
        ),
    ),
    (
        "block_with_extra",
        dict(
            severity="critical",
            seq=7,
            action=A.BLOCK,
            detector="ping_pong",
            count=20,
            tool_name="read",
            reason="ping-pong loop ✗",
            args_hash="a" * 64,
            result_hash="b" * 64,
            paired_tool_name="write",
            error_code="",
            config_version="v3",
            extra={"blocks": "1"},
        ),
    ),
    (
        "abort_rich_extra",
        dict(
            severity="critical",
            seq=9,
            action=A.ABORT,
            detector="global_circuit_breaker",
            count=30,
            tool_name="exec",
            reason="Session execution blocked to prevent runaway loops.",
            error_code="global_circuit_breaker",
            extra={
                "ratio": 0.5,
                "n": 3,
                "float_one": 1.0,
                "big": 2**60,
                "list": [1, "x", None, True],
                "nested": {"k": {"deep": [1.5e-7]}},
                "uni": "é✓🦀",
                "empty": {},
                "str": "plain",
            },
        ),
    ),
    (
        "abort_empty_strings",
        dict(
            run_id="r",
            agent_id="",
            gateway_id="",
            seq=0,
            event_time=0,
            action=A.ABORT,
            detector="",
            severity="",
            count=0,
            tool_name="",
            reason="",
        ),
    ),
    (
        "warn_unicode_run",
        dict(
            run_id="run-ü-🦀",
            seq=2**53 - 1,
            action=A.WARN,
            detector="known_poll_no_progress",
            count=2**40,
            tool_name="process",
            reason="polling ✓",
        ),
    ),
    (
        "block_observe_only",  # mode "observe" (shadow mode): gateways log, never block
        dict(
            severity="critical",
            seq=11,
            action=A.BLOCK,
            detector="generic_repeat",
            count=20,
            tool_name="exec",
            reason="exec repeated 20 times",
            config_version="v4",
            enforced=False,
            extra={"blocks": "1"},
        ),
    ),
]


def make_decisions() -> list[tuple[str, Any]]:
    return [(name, ev.Decision(**{**DECISION_BASE, **fields})) for name, fields in DECISIONS]


UNSAFE_DECISIONS = [
    ("seq_beyond_2_53", {"seq": 2**60}),
    ("count_negative_huge", {"count": -(2**62)}),
]

WATERMARKS = [  # RunWatermark fields; the last one leaves status and event_count at their defaults
    (
        "first",
        {
            "run_id": "run-1",
            "agent_id": "agent-a",
            "gateway_id": "gw-py",
            "seq": 1,
            "event_time": T0 + 1,
            "status": "active",
            "event_count": 1,
        },
    ),
    (
        "large_seq",
        {
            "run_id": "run-2",
            "agent_id": "agent-a",
            "gateway_id": "gw-py",
            "seq": 2**53 - 1,
            "event_time": T0,
            "status": "ended",
            "event_count": 2**40,
        },
    ),
    (
        "unicode_run",
        {
            "run_id": "run-ü-🦀",
            "agent_id": "agént",
            "gateway_id": "gw-日本",
            "seq": 42,
            "event_time": T0 + 42,
            "status": "aborted",
            "event_count": 41,
        },
    ),
    (
        "empty_gateway_defaults",
        {"run_id": "run-3", "agent_id": "", "gateway_id": "", "seq": 0, "event_time": 0},
    ),
    (  # a run that reported usage (issue 28): written with the current RunWatermark version
        "with_usage",
        {
            "run_id": "run-4",
            "agent_id": "agent-a",
            "gateway_id": "gw-py",
            "seq": 9,
            "event_time": T0 + 9,
            "status": "aborted",
            "event_count": 9,
            "input_tokens": 120_000,
            "output_tokens": 3_000,
            "cost_usd": 1.25,
            "tool_calls": 4,
            "loop_tokens": 61_500,
            "loop_cost_usd": 0.625,
            "loop_calls": 2,
            "saved_tokens": 1_200_000,
        },
    ),
]

# RunWatermarks records (issue 24): a worker batch's watermarks on one control partition, by
# the names of WATERMARKS above, in order.
WATERMARK_BATCHES = [
    ("two_runs", ["first", "with_usage"]),
    ("every_run", [name for name, _ in WATERMARKS]),
    ("one_run_defaults", ["empty_gateway_defaults"]),
    ("empty", []),
]


def js_float(x: float) -> bool:
    """Finite and non-zero, and a JS client writes it as a float too (not integral below 1e21)."""
    return math.isfinite(x) and x != 0 and not (x == int(x) and abs(x) < 1e21)


def gateway_json_cases() -> list[dict[str, Any]]:
    """Values a gateway serialises (args/results), with Python's text and any JS difference."""
    cases: list[dict[str, Any]] = [
        {"name": "command", "value": {"command": "make test", "cwd": "/repo"}},
        {
            "name": "nested",
            "value": {"a": [1, 2, {"b": None, "c": True, "d": False}], "e": {}, "f": []},
        },
        {"name": "unicode", "value": {"text": "naïve café 日本語 🦀", "rtl": "שלום"}},
        {
            "name": "escapes",
            "value": (
                'quote " backslash \\ slash / nl \n cr \r tab \t bs \b ff \f'
                " nul \x00 us \x1f del \x7f ls \u2028 ps \u2029"
            ),
        },
        {"name": "ints", "value": [0, 1, -1, 2**31, -(2**31) - 1, 2**53 - 1, -(2**53 - 1)]},
        {"name": "big_ints", "value": [2**53 + 1, 2**63, -(2**64) - 7, 10**30]},
        {
            "name": "floats",
            "value": [
                0.1,
                -2.5,
                1e-5,
                0.0001,
                1.5e300,
                5e-324,
                123456789.125,
                2.5e-10,
                3.141592653589793,
                1e21,
                1.5e21,
                1e22,
                1.7976931348623157e308,
                4503599627370495.5,
            ],
        },
        {
            "name": "integral_floats_below_1e21",
            "value": [1e16, 1.1e16, 9999999999999998.0, 2.0**60, 1e20],
            "ts_expected": (
                "[10000000000000000, 11000000000000000, 9999999999999998,"
                " 1152921504606846976, 100000000000000000000]"
            ),
            "why": "a JS number with no fraction below 1e21 is written as an int",
        },
        {"name": "non_finite", "value": [math.nan, math.inf, -math.inf]},
        {"name": "empty_containers", "value": [[], {}, "", [[]], {"": {}}]},
        {"name": "null", "value": None},
        {"name": "bare_string", "value": "just text"},
        {"name": "true", "value": True},
        {"name": "veto", "value": LOOP_VETO_RESULT},
        {
            "name": "float_integral",
            "value": {"n": 1.0, "m": -0.0, "k": 1e15},
            "ts_expected": '{"n": 1, "m": 0, "k": 1000000000000000}',
            "why": "JS numbers cannot tell a float 1.0 from an int 1",
        },
        {
            "name": "integer_like_keys",
            "value": {"b": 1, "10": 2, "a": 3, "2": 4},
            "ts_expected": '{"2": 4, "10": 2, "b": 1, "a": 3}',
            "why": "JS objects order integer-like keys first, ascending",
        },
    ]
    rng = random.Random(20260101)
    floats = []
    while len(floats) < 300:
        bits = rng.getrandbits(64)
        x = struct.unpack("<d", struct.pack("<Q", bits))[0]
        if js_float(x):
            floats.append(x)
    for power in range(-330, 310, 7):
        x = rng.random() * 10.0**power
        if js_float(x):
            floats.append(x)
    cases.append({"name": "random_floats", "value": floats})
    for case in cases:
        case["python"] = dumps(case["value"])
        case["value"] = tag(case["value"])
    return cases


def make_invalid() -> list[dict[str, Any]]:
    """Messages Python's decoders refuse, with the error class each one raises."""
    good_event = codec.encode_event(ev.RunStarted(ev.Envelope("run-x", "a", "g", 1, T0)))
    tool_call = codec.encode_event(
        ev.ToolCall(ev.Envelope("run-x", "a", "g", 2, T0), "exec", "{}", None)
    )
    decision = codec.encode_decision(
        ev.Decision("run-x", "a", "g", 1, T0, ev.Action.WARN, "d", "warning", 1, "exec", "why")
    )

    def raw_event(datum: dict[str, Any]) -> bytes:
        schema = json.loads(
            (Path(codec.SCHEMA_DIR) / "AgentEvent.avsc").read_text(encoding="utf-8")
        )
        out = io.BytesIO()
        out.write(b"\xc3\x01" + codec.event_schema_fingerprint())
        fastavro.schemaless_writer(out, fastavro.parse_schema(_strip_logical(schema)), datum)
        return out.getvalue()

    empty_run = raw_event(
        {
            "run_id": "",
            "agent_id": "a",
            "gateway_id": "g",
            "seq": 1,
            "event_time": T0,
            "body": ("loopguard.RunStarted", {}),
        }
    )
    nul_name = codec.encode_event(
        ev.ToolCall(ev.Envelope("run-x", "a", "g", 2, T0), "ex\x00ec", "{}", None),
        check_names=False,
    )
    long_name = codec.encode_event(
        ev.ToolCall(ev.Envelope("run-x", "a", "g", 2, T0), "t" * 1025, "{}", None),
        check_names=False,
    )
    # run_id "run-x" is 5 bytes: length byte 0x0a at 10, text at 11..15; make it invalid UTF-8.
    bad_utf8 = bytearray(good_event)
    bad_utf8[11:13] = b"\xff\xfe"
    # body union index: after run_id, agent_id, gateway_id, seq, event_time.
    header_len = 10 + 6 + 2 + 2  # run_id "run-x", agent "a", gateway "g" (length byte + text)
    seq_len = len(_zigzag(1))
    time_len = len(_zigzag(T0))
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
    wm_fields = {"run_id": "run-x", "agent_id": "a", "gateway_id": "g", "seq": 1, "event_time": T0}
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


def _zigzag(n: int) -> bytes:
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


def _strip_logical(node: Any) -> Any:
    if isinstance(node, list):
        return [_strip_logical(n) for n in node]
    if isinstance(node, dict):
        if node.get("type") in ("long", "int", "string", "bytes") and "logicalType" in node:
            return node["type"]
        return {k: _strip_logical(v) for k, v in node.items() if k != "logicalType"}
    return node


# ------------------------------------------------------------------------------ main


def build() -> dict[str, Any]:
    schema_dir = Path(codec.SCHEMA_DIR)
    texts = {p.stem: p.read_text(encoding="utf-8") for p in sorted(schema_dir.glob("*.avsc"))}
    fingerprints = {name: codec.schema_fingerprint(text).hex() for name, text in texts.items()}
    canonical = {name: codec.parsing_canonical_form(text) for name, text in texts.items()}

    events = []
    for name, event in make_events():
        data = codec.encode_event(event)
        assert codec.decode_event(data) == event, name
        events.append({"name": name, "fields": event_fields(event), "hex": data.hex()})

    decisions = []
    for name, decision in make_decisions():
        data = codec.encode_decision(decision)
        assert codec.decode_decision(data) == decision, name
        fields = longs({**decision.to_dict(), "decision_id": decision.decision_id})
        extra_json = {
            k: json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            for k, v in decision.extra.items()
        }
        decisions.append(
            {"name": name, "fields": fields, "extra_json": extra_json, "hex": data.hex()}
        )

    template = make_decisions()[0][1]
    unsafe = []
    for name, change in UNSAFE_DECISIONS:
        decision = dataclasses.replace(template, **change)
        unsafe.append({"name": name, "hex": codec.encode_decision(decision).hex()})

    watermarks = []
    for name, values in WATERMARKS:
        mark = codec.RunWatermark(**values)
        data = codec.encode_watermark(mark)
        assert codec.decode_watermark(data) == mark, name
        fields = longs(dataclasses.asdict(mark), ("seq", "event_time", "event_count"))
        watermarks.append({"name": name, "fields": fields, "hex": data.hex()})

    by_name = dict(WATERMARKS)
    watermark_batches = []
    for name, names in WATERMARK_BATCHES:
        marks = tuple(codec.RunWatermark(**by_name[n]) for n in names)
        data = codec.encode_watermarks(marks)
        assert codec.decode_watermarks(data).marks == marks, name
        fields = [longs(dataclasses.asdict(m), ("seq", "event_time", "event_count")) for m in marks]
        watermark_batches.append({"name": name, "watermarks": fields, "hex": data.hex()})

    return {
        "generator": "clients/vectors/make_python_vectors.py",
        "codec_module": CODEC_MODULE,
        "fingerprints": fingerprints,
        "canonical_forms": canonical,
        "event_schema": {
            "key": codec.event_schema_fingerprint().hex(),
            "value": codec.event_schema_json(),
        },
        "events": events,
        "decisions": decisions,
        "decisions_unsafe_for_js": unsafe,
        "watermarks": watermarks,
        "watermark_batches": watermark_batches,
        "invalid": make_invalid(),
        "gateway_json": gateway_json_cases(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "python.json")
    args = parser.parse_args()
    data = build()
    args.out.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(
        f"wrote {args.out}: {len(data['events'])} events, {len(data['decisions'])} decisions, "
        f"{len(data['watermarks'])} watermarks, "
        f"{len(data['watermark_batches'])} watermark batches, {len(data['invalid'])} invalid, "
        f"{len(data['gateway_json'])} JSON cases (codec {data['codec_module']})"
    )


if __name__ == "__main__":
    main()
