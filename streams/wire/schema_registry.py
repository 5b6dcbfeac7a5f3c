"""The project's Avro schemas, their fingerprints, and the fingerprint -> writer-schema registry.

Schemas are parsed with fastavro. A fingerprint is the CRC-64-AVRO of the schema's Parsing
Canonical Form (both from fastavro), as stamped on single-object messages by
:mod:`streams.wire.avro`. fastavro's canonical form drops ``logicalType`` (and other extra
attributes) as the spec and the Java implementation do, so ``{"type": "long", "logicalType":
"timestamp-millis"}`` canonicalises to ``"long"``; the avro package's own ``canonical_form`` keeps
``{"type":"long"}`` there and would give other fingerprints.

For reading and writing, logical types are stripped from the parsed schemas: ``event_time`` stays
an ``int`` of epoch milliseconds (as in :mod:`streams.core.events`) instead of fastavro turning it
into a ``datetime`` (which also could not hold the full ``long`` range).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro
import fastavro.schema

import schemas
from streams.core.json_depth import load_json
from streams.wire.errors import (
    InvalidSchemaError,
    SchemaMismatchError,
    UnknownSchemaError,
    one_line,
)
from streams.wire.schema_shape import MAX_SCHEMA_BYTES, MAX_SCHEMA_JSON_DEPTH, check_schema_shape

if TYPE_CHECKING:
    import avro.schema

__all__ = [
    "SCHEMA_DIR",
    "MAX_WRITER_SCHEMAS",
    "SCHEMA_NAMES",
    "ParsedSchema",
    "SchemaRegistry",
    "default_registry",
    "load_schemas",
    "own_schemas",
    "parse_schema_text",
    "previous_schemas",
    "parsing_canonical_form",
    "schema_fingerprint",
    "schema_json_for",
]

SCHEMA_DIR = Path(schemas.__file__).resolve().parent  # top-level schemas/, also installed
SCHEMA_NAMES = ("AgentEvent", "Decision", "RunWatermark", "RunWatermarks", "DeadLetter")
# Earlier versions of our schemas, ``<name>.v<N>.avsc``, known to every registry so that
# bytes written with them read without a schemas-topic lookup (and, for RunWatermark, the
# version the worker still writes for runs without usage, which older gateways read).
PREVIOUS_DIR = SCHEMA_DIR / "previous"
# Writer schemas registered at run time that a registry keeps (the least recently used goes
# first): a fleet runs a handful of schema versions; a parsed AgentEvent evolution costs ~20
# KiB, so the bound is ~5 MiB whatever is published (bench/schema_flood_bench.py).
MAX_WRITER_SCHEMAS = 256


# --------------------------------------------------------------- canonical form + fingerprint


def _as_json_value(schema: Any) -> Any:
    """JSON text, an already-decoded JSON value, or an avro-package ``Schema`` (``to_json()``)."""
    if isinstance(schema, str):
        return json.loads(schema)
    to_json = getattr(schema, "to_json", None)
    return to_json() if callable(to_json) else schema


def parsing_canonical_form(schema: Any) -> str:
    """Parsing Canonical Form (fastavro's) of a schema given as JSON text, a decoded JSON value,
    or an avro-package ``Schema``. A ``str`` is always JSON text: pass ``'"long"'``, not ``long``.
    """
    return fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(_as_json_value(schema)))


def schema_fingerprint(schema: Any) -> bytes:
    """CRC-64-AVRO fingerprint of the schema's Parsing Canonical Form (8 bytes, little-endian)."""
    return _fingerprint_of_pcf(parsing_canonical_form(schema))


def _fingerprint_of_pcf(pcf: str) -> bytes:
    # fastavro returns the hex of the fingerprint in wire (little-endian) byte order.
    return bytes.fromhex(fastavro.schema.fingerprint(pcf, "CRC-64-AVRO"))


# ------------------------------------------------------------------------- schema parsing


_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))


def _strip_logical_types(node: Any) -> Any:
    """Drop ``logicalType`` from schema positions only (never from default values).

    An annotated primitive (``{"type": "long", "logicalType": ...}``) becomes its plain name.
    """
    if isinstance(node, list):
        return [_strip_logical_types(branch) for branch in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return kind
    out = {key: value for key, value in node.items() if key != "logicalType"}
    if isinstance(kind, dict | list):
        out["type"] = _strip_logical_types(kind)
    elif kind in ("record", "error") and isinstance(out.get("fields"), list):
        out["fields"] = [
            {**f, "type": _strip_logical_types(f.get("type"))} if isinstance(f, dict) else f
            for f in out["fields"]
        ]
    elif kind == "array" and "items" in out:
        out["items"] = _strip_logical_types(out["items"])
    elif kind == "map" and "values" in out:
        out["values"] = _strip_logical_types(out["values"])
    return out


@dataclass(frozen=True, slots=True)
class ParsedSchema:
    """A writer/reader schema ready for fastavro, with what the codec needs to know about it."""

    parsed: Any  # fastavro-parsed, logical types stripped
    named: Mapping[str, Any]  # fullname -> parsed named type (records, enums, fixed)
    fullname: str  # record fullname, or the type name for a non-named schema
    json_text: str  # compact JSON of the schema as given (logical types kept)
    fingerprint: bytes


def parse_schema_text(schema_json: str) -> ParsedSchema:
    """Parse and fingerprint one schema; raises :class:`InvalidSchemaError`, also for a
    schema over MAX_SCHEMA_BYTES or MAX_SCHEMA_JSON_DEPTH, or of a shape a datum could abuse
    (:mod:`streams.wire.schema_shape`)."""
    if len(schema_json) > MAX_SCHEMA_BYTES:
        raise InvalidSchemaError(
            f"invalid Avro schema: {len(schema_json)} characters, over {MAX_SCHEMA_BYTES}"
        )
    try:
        data = load_json(schema_json, MAX_SCHEMA_JSON_DEPTH)
        compact = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        # The fingerprint is taken from the schema as published, logical types and all.
        fingerprint = _fingerprint_of_pcf(
            fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(data))
        )
        named: dict[str, Any] = {}
        parsed = fastavro.parse_schema(_strip_logical_types(data), named)
    except Exception as exc:  # boundary: schema text can come from other processes
        raise InvalidSchemaError(f"invalid Avro schema: {one_line(exc)}") from exc
    check_schema_shape(parsed, named)
    if isinstance(parsed, dict):
        fullname = str(parsed.get("name") or parsed.get("type"))
    else:
        fullname = "union" if isinstance(parsed, list) else str(parsed)
    return ParsedSchema(parsed, named, fullname, compact, fingerprint)


@cache
def _schema_texts() -> dict[str, str]:
    texts = {}
    for name in SCHEMA_NAMES:
        path = SCHEMA_DIR / f"{name}.avsc"
        try:
            texts[name] = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidSchemaError(f"cannot read schema {path}: {one_line(exc)}") from exc
    return texts


@cache
def previous_schemas() -> dict[str, ParsedSchema]:
    """Earlier versions of our schemas (``schemas/previous/<name>.v<N>.avsc``), by file stem."""
    out = {}
    for path in sorted(PREVIOUS_DIR.glob("*.avsc")):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidSchemaError(f"cannot read schema {path}: {one_line(exc)}") from exc
        out[path.stem] = parse_schema_text(text)
    return out


@cache
def own_schemas() -> dict[str, ParsedSchema]:
    """The project's schemas (``schemas/*.avsc``) parsed for the codec, by name."""
    out = {}
    for name, text in _schema_texts().items():
        schema = parse_schema_text(text)
        if not isinstance(schema.parsed, dict) or schema.parsed.get("type") != "record":
            raise InvalidSchemaError(f"schema {name} must be a record")
        out[name] = schema
    return out


def load_schemas() -> dict[str, avro.schema.Schema]:
    """The project's schemas as the reference avro package parses them (logical types kept).

    For interop checks and inspection; the codec itself uses fastavro (:func:`own_schemas`).
    """
    import avro.schema  # the reference implementation; not needed by the codec's hot path

    return {name: avro.schema.parse(text) for name, text in _schema_texts().items()}


# ------------------------------------------------------------------------------ registry


class SchemaRegistry:
    """Fingerprint -> writer schema.

    Pre-loaded with the project's schemas and their previous versions (kept for good);
    :meth:`register` adds others (a newer gateway's schema taken from a schemas topic), at
    most ``max_schemas`` of them: the least recently used goes first (issue 40: 30,000
    schemas on the topic grew a worker by 244 MB), and a schema evicted is looked up again
    when a message needs it. Not locked: meant for one asyncio worker thread.
    """

    def __init__(
        self, schema_texts: Iterable[str] | None = None, max_schemas: int = MAX_WRITER_SCHEMAS
    ) -> None:
        self._pinned: dict[bytes, ParsedSchema] = {}
        self._entries: OrderedDict[bytes, ParsedSchema] = OrderedDict()
        self.max_schemas = max(int(max_schemas), 1)
        self.evicted = 0  # schemas dropped for the bound (a metric, and tests)
        if schema_texts is None:
            for schema in [*own_schemas().values(), *previous_schemas().values()]:
                self._pinned.setdefault(schema.fingerprint, schema)
        else:
            for text in schema_texts:
                self.register(text)

    def register(self, schema_json: str) -> bytes:
        """Add a writer schema; returns its 8-byte fingerprint. Idempotent."""
        return self.add(parse_schema_text(schema_json))

    def add(self, schema: ParsedSchema) -> bytes:
        """Add a parsed writer schema (same fingerprint = same binary layout: the first
        text seen is kept); the least recently used goes past ``max_schemas``."""
        fingerprint = schema.fingerprint
        if fingerprint in self._pinned:
            return fingerprint
        if fingerprint in self._entries:
            self._entries.move_to_end(fingerprint)
            return fingerprint
        self._entries[fingerprint] = schema
        while len(self._entries) > self.max_schemas:
            self._entries.popitem(last=False)
            self.evicted += 1
        return fingerprint

    def __contains__(self, fingerprint: object) -> bool:
        return fingerprint in self._pinned or fingerprint in self._entries

    def __len__(self) -> int:
        return len(self._pinned) + len(self._entries)

    def __repr__(self) -> str:
        return f"SchemaRegistry({len(self)} schemas)"

    def fingerprints(self) -> list[bytes]:
        return [*self._pinned, *self._entries]

    def _get(self, fingerprint: bytes) -> ParsedSchema:
        entry = self._pinned.get(fingerprint)
        if entry is None:
            entry = self._entries.get(fingerprint)
            if entry is None:
                raise UnknownSchemaError(fingerprint)
            self._entries.move_to_end(fingerprint)
        return entry

    def schema_json(self, fingerprint: bytes) -> str:
        """Compact JSON of a registered writer schema; raises :class:`UnknownSchemaError`."""
        return self._get(fingerprint).json_text

    def writer_for(self, fingerprint: bytes, reader: ParsedSchema) -> ParsedSchema:
        """The registered writer schema for messages to be read as ``reader``.

        Raises :class:`UnknownSchemaError`, or :class:`SchemaMismatchError` when the writer is
        another record altogether (say a Decision sent to the events topic).
        """
        writer = self._get(fingerprint)
        if writer.fullname != reader.fullname:
            raise SchemaMismatchError(
                f"message was written with schema {writer.fullname}, expected {reader.fullname}"
            )
        return writer


@cache
def default_registry() -> SchemaRegistry:
    """Process-wide registry used when callers pass none."""
    return SchemaRegistry()


def schema_json_for(fingerprint: bytes, registry: SchemaRegistry | None = None) -> str:
    """Writer schema JSON for a fingerprint (ours or registered)."""
    return (registry or default_registry()).schema_json(fingerprint)
