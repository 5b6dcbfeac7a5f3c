#!/usr/bin/env python3
"""Write clients/vectors/python.json: messages encoded by the Python codec, for other clients.

The TypeScript client's tests (clients/typescript) decode every message here, compare the
fields, and encode the fields again byte for byte; they also check its Python-compatible JSON
text against ``json.dumps`` on the ``gateway_json`` cases and refuse the ``invalid`` messages
with the same error class as Python.

Run with the project's virtualenv (the editable install provides ``streams``)::

    .venv/bin/python clients/vectors/make_python_vectors.py [--out PATH]

``tests/unit/gateway/test_cross_language_vectors.py`` runs it and fails when python.json is
not what it writes, and decodes ``typescript.json`` (written by ``npm run vectors`` in
clients/typescript) with the Python codec. The ``invalid`` and ``gateway_json`` cases are
built beside it, in invalid_vectors.py and json_vectors.py (imported from the script's own
directory, so run it as a script).

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
import json
from pathlib import Path
from typing import Any

from invalid_vectors import make_invalid
from json_vectors import LOOP_VETO_RESULT, dumps, gateway_json_cases

from streams.core import events as ev
from streams.wire import avro as codec

HERE = Path(__file__).resolve().parent
CODEC_MODULE = codec.__name__


# ------------------------------------------------------------------------------ helpers


def longs(fields: dict[str, Any], names: tuple[str, ...] = ("seq", "event_time", "count")) -> dict:
    return {k: (str(v) if k in names and isinstance(v, int) else v) for k, v in fields.items()}


def event_fields(event: Any) -> dict[str, Any]:
    return longs(ev.event_to_dict(event))


# ------------------------------------------------------------------------------ the cases

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch ms


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
        "invalid": make_invalid(T0),
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
