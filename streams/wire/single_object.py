"""Avro single-object framing and our schemas' codecs, on fastavro.

Every message is ``C3 01`` + the 8-byte CRC-64-AVRO fingerprint of the writer schema's Parsing
Canonical Form + the binary datum (the Avro spec's single-object encoding; fastavro has no helper
for the framing, so it is done here). The fingerprint lets a worker decode messages from a gateway
running a newer schema (Avro schema resolution onto the worker's own reader schema, by fastavro)
without a schema-registry service: it only needs the writer schema registered in a
:class:`SchemaRegistry` (see :mod:`streams.wire.schema_registry`). Which record goes in which
schema, and back, is :mod:`streams.wire.avro`'s job.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.validation import ValidationError, validate

from streams.wire.errors import (
    BadMarkerError,
    CodecError,
    EncodeError,
    InvalidDatumError,
    PayloadTooLargeError,
    SchemaMismatchError,
    TruncatedMessageError,
    one_line,
)
from streams.wire.read_probe import ReadProbe
from streams.wire.schema_registry import (
    ParsedSchema,
    SchemaRegistry,
    default_registry,
    own_schemas,
)

MARKER = b"\xc3\x01"
HEADER_SIZE = len(MARKER) + 8
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024
# A dead letter wraps a payload that may itself have hit the event limit, plus the reason.
DEAD_LETTER_MAX_SIZE = 2 * DEFAULT_MAX_MESSAGE_SIZE

_INT_RANGES = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}
# How fastavro validation errors describe the expected type, in Python terms.
_WANTED = {
    "null": "None",
    "boolean": "a bool",
    "int": "an int in the 32-bit range",
    "long": "an int in the 64-bit range",
    "float": "a float",
    "double": "a float",
    "bytes": "bytes",
    "string": "a str",
}

_IntFields = tuple[tuple[str, int, int], ...]


# ------------------------------------------------------------------------ our own schemas


def _int_fields(record: Mapping[str, Any]) -> _IntFields:
    """(name, min, max) of a record's plain int/long fields.

    fastavro's writer silently writes ``True`` as 1 and truncates ``1.5`` to 1 for these, so
    they are checked before writing; everything else it rejects itself (and the error is then
    explained with fastavro's validator).
    """
    return tuple(
        (f["name"], *_INT_RANGES[f["type"]])
        for f in record.get("fields", ())
        if isinstance(f["type"], str) and f["type"] in _INT_RANGES
    )


def _ints_ok(fields: _IntFields, values: Mapping[str, Any]) -> bool:
    for name, low, high in fields:
        value = values.get(name)
        if type(value) is not int or not low <= value <= high:
            return False
    return True


def _describe(schema: Any) -> str:
    if isinstance(schema, str):
        return _WANTED.get(schema, f"a {schema}")
    if isinstance(schema, dict):
        if schema.get("type") == "enum":
            return f"one of {schema['symbols']}"
        return f"a {schema.get('name') or schema.get('type')}"
    return "a union member"


def _validation_message(record: str, errors: Iterable[Any]) -> str:
    """``Record.field must be <type>, got <value>`` from fastavro's first failing field."""
    errors = list(errors)
    first = errors[0]
    wanted = " or ".join(
        dict.fromkeys(_describe(e.schema) for e in errors if e.field == first.field)
    )
    label = ".".join(str(first.field).split(".")[-2:]) or record  # drop the namespace
    value = first.datum
    return f"{label} must be {wanted}, got {type(value).__name__} {value!r:.60}"


class SchemaCodec:
    """One of our schemas with its message header, pre-write checks and fastavro plumbing."""

    __slots__ = ("header", "int_fields", "name", "schema")

    def __init__(self, name: str, schema: ParsedSchema) -> None:
        self.name = name
        self.schema = schema
        self.header = MARKER + schema.fingerprint
        self.int_fields = {
            fullname: _int_fields(named)
            for fullname, named in schema.named.items()
            if named.get("type") == "record"
        }

    def encode(
        self,
        datum: Mapping[str, Any],
        max_size: int,
        parts: Iterable[tuple[str, Mapping[str, Any]]] = (),
    ) -> bytes:
        """Header + datum. ``parts`` are nested (record name, values) whose ints to pre-check."""
        ints = self.int_fields
        if not _ints_ok(ints[self.schema.fullname], datum) or not all(
            _ints_ok(ints[name], values) for name, values in parts
        ):
            self.explain(datum)
        out = io.BytesIO()
        out.write(self.header)
        try:
            schemaless_writer(out, self.schema.parsed, datum)
        except Exception as exc:  # boundary: fastavro/unicode errors must surface as CodecError
            self.explain(datum)
            raise EncodeError(f"cannot encode {self.name}: {one_line(exc)}") from exc
        size = out.tell()
        if size > max_size:
            raise PayloadTooLargeError(size, max_size)
        return out.getvalue()

    def explain(self, datum: Mapping[str, Any]) -> None:
        """Raise :class:`EncodeError` naming the first field fastavro's validator rejects."""
        try:
            validate(datum, self.schema.parsed, raise_errors=True)
        except ValidationError as exc:
            raise EncodeError(_validation_message(self.name, exc.errors)) from exc
        except Exception as exc:  # boundary: e.g. a non-mapping record
            raise EncodeError(f"cannot encode {self.name}: {one_line(exc)}") from exc

    def decode(
        self, data: object, registry: SchemaRegistry | None, max_size: int
    ) -> dict[str, Any]:
        """Check the framing, then read the datum (resolving a foreign writer schema onto ours).
        ``data`` is whatever a caller handed in: anything but bytes, a bytearray or a memoryview
        is an :class:`InvalidDatumError`, also where this module is compiled (setup.py)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidDatumError(f"expected bytes, got {type(data).__name__}")
        size = len(data)
        if size > max_size:
            raise PayloadTooLargeError(size, max_size)
        head = bytes(data[:2])
        if head != MARKER[: len(head)]:
            raise BadMarkerError(
                f"bad marker {head.hex()}: not an Avro single-object message (expected c301)"
            )
        if size < HEADER_SIZE:
            raise TruncatedMessageError(f"message is {size} bytes, shorter than the 10-byte header")
        buf = data if isinstance(data, bytes) else bytes(data)
        fingerprint = buf[2:HEADER_SIZE]
        if fingerprint == self.schema.fingerprint:
            writer, reader = self.schema, None
        else:
            writer = (registry or default_registry()).writer_for(fingerprint, self.schema)
            reader = self.schema
        stream = io.BytesIO(buf)
        stream.seek(HEADER_SIZE)
        try:
            datum = _read(stream, writer, reader)
        except SchemaResolutionError as exc:
            raise self._mismatch(writer, exc) from exc
        except Exception as exc:  # boundary: whatever fastavro raises on bad bytes
            raise self._read_error(buf, writer, reader, exc) from exc
        end = stream.tell()
        if end != size:
            raise InvalidDatumError(f"{size - end} trailing bytes after the {self.name} datum")
        if not _ints_ok(self.int_fields[self.schema.fullname], datum):
            # fastavro reads an Avro int as a 64-bit long without a range check.
            raise InvalidDatumError(f"{self.name} datum has an int field outside its range")
        return datum

    def _mismatch(self, writer: ParsedSchema, exc: Exception) -> SchemaMismatchError:
        unknown = sorted(set(writer.named) - set(self.schema.named))
        why = f"writer types unknown to this reader: {', '.join(unknown)}" if unknown else ""
        return SchemaMismatchError(
            f"cannot resolve writer schema {writer.fingerprint.hex()} onto {self.name}: "
            + (why or one_line(exc))
        )

    def _read_error(
        self, buf: bytes, writer: ParsedSchema, reader: ParsedSchema | None, exc: Exception
    ) -> CodecError:
        """Truncated if fastavro asked for bytes past the end, else an invalid datum.

        Reads again through :class:`~streams.wire.read_probe.ReadProbe` (errors are rare; this
        keeps the hot path free of a Python-level ``read``) to see whether a read came up short.
        """
        probe = ReadProbe(buf)
        probe.seek(HEADER_SIZE)
        with contextlib.suppress(Exception):  # it fails again; only the probe's record counts
            _read(probe, writer, reader)
        if probe.anomaly == "short":
            return TruncatedMessageError(f"{self.name} message ends inside the datum")
        if isinstance(exc, IndexError) and probe.anomaly is None:
            # fastavro indexes the union branch list or the enum symbols with the wire index.
            return InvalidDatumError(
                f"invalid {self.name} datum: union branch index or enum symbol index out of range"
            )
        return InvalidDatumError(f"invalid {self.name} datum: {one_line(exc)}")


def _read(stream: io.BytesIO, writer: ParsedSchema, reader: ParsedSchema | None) -> Any:
    return schemaless_reader(
        stream,
        writer.parsed,
        None if reader is None else reader.parsed,
        return_record_name=True,
    )


@cache
def own_codecs() -> dict[str, SchemaCodec]:
    return {name: SchemaCodec(name, schema) for name, schema in own_schemas().items()}


def event_schema_json() -> str:
    """Our AgentEvent writer schema as compact JSON, for gateways to publish to a schemas topic."""
    return own_codecs()["AgentEvent"].schema.json_text


def event_schema_fingerprint() -> bytes:
    """Fingerprint our encoder stamps on every event."""
    return own_codecs()["AgentEvent"].schema.fingerprint
