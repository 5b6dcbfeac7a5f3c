"""Byte compatibility of the TypeScript gateway client (clients/typescript) with the Python codec.

``clients/vectors/typescript.json`` is written by ``npm run vectors`` in clients/typescript.
Every message in it must decode with the Python codec to the fields recorded next to it and
encode again to the same bytes; the JSON texts the TypeScript client writes for tool arguments
and results must be what ``json.dumps(..., ensure_ascii=False)`` writes for the same value.
``clients/vectors/python.json`` (read by the TypeScript tests) must still be what
``clients/vectors/make_python_vectors.py`` writes.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streams.core.events import event_to_dict
from streams.wire import avro as codec

VECTORS = Path(__file__).resolve().parents[3] / "clients" / "vectors"
TS = json.loads((VECTORS / "typescript.json").read_text(encoding="utf-8"))
LONGS = {"seq", "event_time", "count", "event_count"}
STALE = "typescript.json is stale: run `npm run vectors` in clients/typescript"


def _longs(fields: dict[str, Any]) -> dict[str, Any]:
    """Vector fields with the long values (decimal strings in the file) as ints."""
    return {k: int(v) if k in LONGS and isinstance(v, str) else v for k, v in fields.items()}


def _schema_texts() -> dict[str, str]:
    schemas = sorted(Path(codec.SCHEMA_DIR).glob("*.avsc"))
    return {p.stem: p.read_text(encoding="utf-8") for p in schemas}


def _json_fixpoint(text: str | None) -> None:
    """The text is exactly what Python's gateway client writes for the value it holds."""
    if text is not None:
        assert json.dumps(json.loads(text), ensure_ascii=False) == text


def _without_extra(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k != "extra"}


# ----------------------------------------------------------------------------- schemas


def test_fingerprints_match_the_python_codec() -> None:
    ours = {name: codec.schema_fingerprint(text).hex() for name, text in _schema_texts().items()}
    assert TS["fingerprints"] == ours, STALE


def test_canonical_forms_match() -> None:
    ours = {name: codec.parsing_canonical_form(text) for name, text in _schema_texts().items()}
    assert TS["canonical_forms"] == ours, STALE


def test_writer_schema_announcement_matches_publish_schema() -> None:
    assert TS["event_schema"]["key"] == codec.event_schema_fingerprint().hex()
    assert TS["event_schema"]["value"] == codec.event_schema_json()


# ------------------------------------------------------------------------------ events


@pytest.mark.parametrize("vector", TS["events"], ids=[v["name"] for v in TS["events"]])
def test_typescript_event_decodes_and_reencodes(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    event = codec.decode_event(data)
    assert event_to_dict(event) == _longs(vector["fields"])
    assert codec.encode_event(event) == data
    body = vector["fields"]
    _json_fixpoint(body.get("args_json"))
    _json_fixpoint(body.get("result_json"))


def test_typescript_client_publishes_the_loop_veto_python_recognises() -> None:
    by_name = {v["name"]: v["fields"] for v in TS["events"]}
    veto = by_name["client_loop_veto"]
    expected = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
    assert veto["result_json"] == json.dumps(expected, ensure_ascii=False)
    assert by_name["client_blocked_call"]["seq"] == str(int(veto["seq"]) - 1)


# --------------------------------------------------------------------------- decisions


@pytest.mark.parametrize("vector", TS["decisions"], ids=[v["name"] for v in TS["decisions"]])
def test_typescript_decision_decodes_and_reencodes(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    decision = codec.decode_decision(data)
    decoded = {**decision.to_dict(), "decision_id": decision.decision_id}
    assert _without_extra(decoded) == _without_extra(_longs(vector["fields"]))
    assert decision.extra == {k: json.loads(t) for k, t in vector["extra_json"].items()}
    assert codec.encode_decision(decision) == data
    assert codec.decode_control(data) == decision


# -------------------------------------------------------------------------- watermarks


@pytest.mark.parametrize("vector", TS["watermarks"], ids=[v["name"] for v in TS["watermarks"]])
def test_typescript_watermark_decodes_and_reencodes(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    mark = codec.decode_watermark(data)
    assert dataclasses.asdict(mark) == _longs(vector["fields"])
    assert codec.encode_watermark(mark) == data
    assert codec.decode_control(data) == mark


BATCHES = TS["watermark_batches"]


@pytest.mark.parametrize("vector", BATCHES, ids=[v["name"] for v in BATCHES])
def test_typescript_watermark_batch_decodes_and_reencodes(vector: dict[str, Any]) -> None:
    """A RunWatermarks record (issue 24) the TypeScript codec wrote reads here mark for mark."""
    data = bytes.fromhex(vector["hex"])
    batch = codec.decode_watermarks(data)
    assert [dataclasses.asdict(m) for m in batch.marks] == [_longs(f) for f in vector["watermarks"]]
    assert codec.encode_watermarks(batch.marks) == data
    assert codec.decode_control(data) == batch
    assert codec.control_messages(data) == batch.marks


def test_typescript_vectors_hold_a_batch_of_several_runs_with_usage() -> None:
    """The batches cover what a worker writes: several runs in one record, usage and none."""
    sizes = [len(v["watermarks"]) for v in BATCHES]
    assert max(sizes) >= 2 and 0 in sizes
    marks = [m for v in BATCHES for m in v["watermarks"]]
    assert any(m["input_tokens"] for m in marks) and any(not m["input_tokens"] for m in marks)


# -------------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("case", TS["json"], ids=[c["name"] for c in TS["json"]])
def test_typescript_json_is_what_python_writes(case: dict[str, Any]) -> None:
    _json_fixpoint(case["typescript"])


# ------------------------------------------------------------------- python.json is current


def test_python_vectors_are_current(tmp_path: Path) -> None:
    """python.json (what the TypeScript tests check against) is what the codec writes now:
    the script run as documented, writing elsewhere."""
    written = tmp_path / "python.json"
    subprocess.run(
        [sys.executable, str(VECTORS / "make_python_vectors.py"), "--out", str(written)],
        check=True,
        capture_output=True,
    )
    fresh = json.loads(written.read_text(encoding="utf-8"))
    stored = json.loads((VECTORS / "python.json").read_text(encoding="utf-8"))
    stale = sorted(k for k in fresh.keys() | stored.keys() if fresh.get(k) != stored.get(k))
    fix = "run .venv/bin/python clients/vectors/make_python_vectors.py"
    assert not stale, f"python.json differs in {stale}: {fix}"
