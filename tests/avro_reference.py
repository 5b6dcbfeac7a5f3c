"""The reference ``avro`` package as the other side of the wire: it writes and reads the bytes
loopguard's fastavro codec must agree with (older and newer schemas, named union branches).
"""

from __future__ import annotations

import io
import json
from typing import Any

import avro.io
import avro.schema

from streams.wire.avro import MARKER, schema_fingerprint


def body_branch(schema: dict[str, Any], name: str) -> dict[str, Any]:
    body = next(f for f in schema["fields"] if f["name"] == "body")
    return next(b for b in body["type"] if b["name"] == name)


class NamedBranchWriter(avro.io.DatumWriter):
    """avro's DatumWriter, except that a ``(name, value)`` tuple writes the union branch so named.

    avro's stock writer guesses the branch from the value: an empty record (RunStarted) fits any
    dict, and a ToolCall without tool_call_id also fits ToolResult.
    """

    def write_union(
        self, writers_schema: avro.schema.UnionSchema, datum: object, encoder: avro.io.BinaryEncoder
    ) -> None:
        if not isinstance(datum, tuple):
            return super().write_union(writers_schema, datum, encoder)
        name, value = datum
        branches = writers_schema.schemas
        index = next(i for i, b in enumerate(branches) if getattr(b, "fullname", None) == name)
        encoder.write_long(index)
        return self.write_data(branches[index], value, encoder)


def plain_avro_schema(schema: dict[str, Any]) -> avro.schema.Schema:
    """avro-package schema with event_time as a plain long (avro would make it a datetime)."""
    plain = json.loads(json.dumps(schema))
    for f in plain["fields"]:
        if f["name"] == "event_time":
            f["type"] = "long"
    return avro.schema.make_avsc_object(plain)


def avro_encode(schema: avro.schema.Schema, datum: dict[str, Any]) -> bytes:
    """The bare datum as the reference avro package writes it (union branches named by tuple)."""
    buf = io.BytesIO()
    NamedBranchWriter(schema).write_data(schema, datum, avro.io.BinaryEncoder(buf))
    return buf.getvalue()


def avro_decode(
    schema: avro.schema.Schema, data: bytes, reader: avro.schema.Schema | None = None
) -> Any:
    """The bare datum as the reference avro package reads it (resolved onto ``reader`` when
    given); all bytes must be consumed."""
    stream = io.BytesIO(data)
    datum = avro.io.DatumReader(schema, reader).read(avro.io.BinaryDecoder(stream))
    assert stream.tell() == len(data)
    return datum


def avro_write(schema_json: str, datum: dict[str, Any], kind: str) -> bytes:
    """Frame an event written by avro's DatumWriter with another (e.g. newer) schema."""
    schema = plain_avro_schema(json.loads(schema_json))
    body = avro_encode(schema, {**datum, "body": (f"loopguard.{kind}", datum["body"])})
    return MARKER + schema_fingerprint(schema_json) + body
