"""Byte compatibility of the TypeScript gateway client (clients/typescript) with the Python codec.

``typescript.json`` is written by ``npm run vectors`` in clients/typescript. Every message in it
must decode with the Python codec to the fields recorded next to it and encode again to the
same bytes; the JSON texts the TypeScript client writes for tool arguments and results must be
what ``json.dumps(..., ensure_ascii=False)`` writes for the same value. ``python.json`` (read by
the TypeScript tests) must still be what ``make_python_vectors.py`` produces.

Run: ``pytest clients/vectors/test_vectors.py`` (the vector files are found next to this file,
or under ``clients/vectors`` of the checkout this file sits in, or in $LOOPGUARD_VECTORS_DIR).
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest


def _vectors_dir() -> Path:
    if os.environ.get("LOOPGUARD_VECTORS_DIR"):
        return Path(os.environ["LOOPGUARD_VECTORS_DIR"])
    here = Path(__file__).resolve().parent
    for folder in (here, *here.parents):
        for candidate in (folder, folder / "clients" / "vectors"):
            if (candidate / "typescript.json").exists() and (candidate / "make_python_vectors.py").exists():
                return candidate
    raise FileNotFoundError("clients/vectors not found; set LOOPGUARD_VECTORS_DIR")


VECTORS = _vectors_dir()
REPO = VECTORS.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# The restructured layout first, then the layout of the commit this test was written against.
try:
    codec = importlib.import_module("streams.wire.avro")
except ImportError:
    codec = importlib.import_module("streams.avro_codec")
try:
    events_mod = importlib.import_module("streams.core.events")
except ImportError:
    events_mod = importlib.import_module("streams.events")

TS = json.loads((VECTORS / "typescript.json").read_text(encoding="utf-8"))
LONGS = {"seq", "event_time", "count", "event_count"}
STALE = "typescript.json is stale: run `npm run vectors` in clients/typescript"


def _longs(fields: dict[str, Any]) -> dict[str, Any]:
    """Vector fields with the long values (decimal strings in the file) as ints."""
    return {k: int(v) if k in LONGS and isinstance(v, str) else v for k, v in fields.items()}


def _schema_texts() -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(Path(codec.SCHEMA_DIR).glob("*.avsc"))}


def _json_fixpoint(text: str | None) -> None:
    """The text is exactly what Python's gateway client writes for the value it holds."""
    if text is not None:
        assert json.dumps(json.loads(text), ensure_ascii=False) == text


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
    assert events_mod.event_to_dict(event) == _longs(vector["fields"])
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
    fields = _longs(vector["fields"])
    decoded = {**decision.to_dict(), "decision_id": decision.decision_id}
    assert {k: v for k, v in decoded.items() if k != "extra"} == {k: v for k, v in fields.items() if k != "extra"}
    assert decision.extra == {k: json.loads(t) for k, t in vector["extra_json"].items()}
    assert codec.encode_decision(decision) == data


# -------------------------------------------------------------------------- watermarks


class _Watermarks:
    """RunWatermark with the codec's functions when it has them, else the same framing here."""

    def __init__(self) -> None:
        text = (Path(codec.SCHEMA_DIR) / "RunWatermark.avsc").read_text(encoding="utf-8")
        schema = json.loads(text)
        self.fingerprint = codec.schema_fingerprint(text)
        self.fields = [f["name"] for f in schema["fields"]]
        import fastavro

        def strip(node: Any) -> Any:
            if isinstance(node, list):
                return [strip(n) for n in node]
            if isinstance(node, dict):
                if "logicalType" in node and node.get("type") in ("int", "long", "string", "bytes"):
                    return node["type"]
                return {k: strip(v) for k, v in node.items() if k != "logicalType"}
            return node

        self.fastavro = fastavro
        self.schema = fastavro.parse_schema(strip(schema))

    def decode(self, data: bytes) -> dict[str, Any]:
        if hasattr(codec, "decode_watermark"):
            value = codec.decode_watermark(data)
            value = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else dict(value)
            return {name: value[name] for name in self.fields if name in value}
        assert data[:2] == b"\xc3\x01" and data[2:10] == self.fingerprint
        stream = io.BytesIO(data)
        stream.seek(10)
        datum = self.fastavro.schemaless_reader(stream, self.schema)
        assert stream.tell() == len(data), "trailing bytes"
        return datum

    def encode(self, datum: dict[str, Any]) -> bytes:
        if hasattr(codec, "encode_watermark"):
            cls = getattr(events_mod, "RunWatermark", None) or getattr(codec, "RunWatermark", None)
            if cls is not None:
                names = {f.name for f in dataclasses.fields(cls)}
                return codec.encode_watermark(cls(**{k: v for k, v in datum.items() if k in names}))
        out = io.BytesIO()
        out.write(b"\xc3\x01" + self.fingerprint)
        self.fastavro.schemaless_writer(out, self.schema, datum)
        return out.getvalue()


@pytest.mark.parametrize("vector", TS["watermarks"], ids=[v["name"] for v in TS["watermarks"]])
def test_typescript_watermark_decodes_and_reencodes(vector: dict[str, Any]) -> None:
    watermarks = _Watermarks()
    data = bytes.fromhex(vector["hex"])
    datum = watermarks.decode(data)
    assert datum == _longs(vector["fields"])
    assert watermarks.encode(datum) == data


# -------------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("case", TS["json"], ids=[c["name"] for c in TS["json"]])
def test_typescript_json_is_what_python_writes(case: dict[str, Any]) -> None:
    _json_fixpoint(case["typescript"])


# ------------------------------------------------------------------- python.json is current


def test_python_vectors_are_current() -> None:
    """python.json (what the TypeScript tests check against) is what the codec writes now."""
    sys.path.insert(0, str(VECTORS))
    try:
        maker = importlib.import_module("make_python_vectors")
    finally:
        sys.path.remove(str(VECTORS))
    fresh = maker.build()
    stored = json.loads((VECTORS / "python.json").read_text(encoding="utf-8"))
    for key in ("codec_module", "watermark_codec", "generator"):
        fresh.pop(key, None)
        stored.pop(key, None)
    # Round-trip through JSON so tuples/lists and the like compare as stored.
    fresh = json.loads(json.dumps(fresh, ensure_ascii=False))
    stale = sorted(k for k in fresh.keys() | stored.keys() if fresh.get(k) != stored.get(k))
    assert not stale, f"python.json differs in {stale}: run python clients/vectors/make_python_vectors.py"
