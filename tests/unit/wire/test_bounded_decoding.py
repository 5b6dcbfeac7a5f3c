"""Issue 40: values from other processes decode with bounded depth and size, and writer
schemas that would let a small datum claim an unbounded read are refused."""

from __future__ import annotations

import json
import sys

import pytest
from poison_records import (
    DEEP_JSON,
    EMPTY_ITEMS_SCHEMA,
    RECURSIVE_SCHEMA,
    decision,
    deep_extra_decision,
    deep_signal,
)

from streams.core.canonical import parse_json
from streams.core.json_depth import MAX_FALLBACK_DEPTH, NestedTooDeepError, load_json
from streams.wire.avro import MAX_EXTRA_DEPTH, decode_control, decode_decision, encode_decision
from streams.wire.errors import InvalidDatumError, InvalidSchemaError, PayloadTooLargeError
from streams.wire.incident_codec import decode_signal
from streams.wire.schema_registry import (
    SchemaRegistry,
    own_schemas,
    parse_schema_text,
    previous_schemas,
)
from streams.wire.schema_shape import MAX_SCHEMA_BYTES, MAX_SCHEMA_JSON_DEPTH


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_decision_with_extra_nested_50000_deep_is_refused_with_a_clear_error() -> None:
    data = deep_extra_decision()
    assert len(data) > 100_000
    for decode in (decode_decision, decode_control):
        with pytest.raises(InvalidDatumError, match=f"nested deeper than {MAX_EXTRA_DEPTH}"):
            decode(data)


def test_extra_within_the_bound_still_decodes() -> None:
    value = json.loads(nested(MAX_EXTRA_DEPTH))
    kept = decode_decision(encode_decision(decision(extra={"k": value, "s": "text"})))
    assert kept.extra == {"k": value, "s": "text"}


def test_load_json_refuses_past_its_depth_wherever_it_is_called_from() -> None:
    def deep_stack(levels: int) -> object:
        return load_json(nested(MAX_FALLBACK_DEPTH)) if levels == 0 else deep_stack(levels - 1)

    limit = sys.getrecursionlimit()
    # near the recursion limit already, the bounded decoder still has its headroom
    assert deep_stack(limit - 150) == json.loads(nested(MAX_FALLBACK_DEPTH))
    with pytest.raises(NestedTooDeepError):
        load_json(DEEP_JSON)
    with pytest.raises(NestedTooDeepError, match="deeper than 3"):
        load_json(b"[[[[1]]]]", 3)
    assert load_json('["[[[[", "]"]', 1) == ["[[[[", "]"]  # brackets in strings do not count
    with pytest.raises(ValueError):
        load_json("{not json")
    with pytest.raises(ValueError):
        load_json(b"\xff")
    # parse_json (call hashing) keeps what is not JSON as text, as before
    assert parse_json(DEEP_JSON) == DEEP_JSON


def test_an_incident_signal_nested_deep_or_oversized_is_refused() -> None:
    with pytest.raises(InvalidDatumError, match="nested deeper"):
        decode_signal(deep_signal())
    with pytest.raises(PayloadTooLargeError):
        decode_signal(b" " * 2_000_000)
    with pytest.raises(InvalidDatumError):
        decode_signal(b'["not", "an object"]')


def test_a_recursive_writer_schema_is_refused() -> None:
    """fastavro's compiled reader overflows the C stack on 200,000 nested branches of such
    a schema: the process ends, no exception."""
    with pytest.raises(InvalidSchemaError, match="Nest holds itself"):
        parse_schema_text(RECURSIVE_SCHEMA)
    hidden = {  # the recursion in a later field of a nested record
        "type": "record",
        "name": "Outer",
        "fields": [
            {"name": "x", "type": "long"},
            {
                "name": "inner",
                "type": {
                    "type": "record",
                    "name": "Inner",
                    "fields": [
                        {"name": "y", "type": "long"},
                        {"name": "again", "type": {"type": "map", "values": "Outer"}},
                    ],
                },
            },
        ],
    }
    with pytest.raises(InvalidSchemaError, match="Outer holds itself"):
        parse_schema_text(json.dumps(hidden))


@pytest.mark.parametrize(
    "items",
    [
        "null",
        {"type": "record", "name": "Empty", "fields": []},
        {"type": "fixed", "name": "Nothing", "size": 0},
        {"type": "record", "name": "Nulls", "fields": [{"name": "n", "type": "null"}]},
    ],
)
def test_an_array_of_items_that_take_no_bytes_is_refused(items: object) -> None:
    """Five bytes of such an array claimed 50 million items (a 400 MB list, 1.2 s)."""
    array = {"type": "array", "items": items}
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": array}]}
    with pytest.raises(InvalidSchemaError, match="take no bytes"):
        parse_schema_text(json.dumps(schema))
    with pytest.raises(InvalidSchemaError, match="take no bytes"):
        parse_schema_text(EMPTY_ITEMS_SCHEMA)


def test_ordinary_shapes_and_our_own_schemas_are_accepted() -> None:
    assert own_schemas() and previous_schemas()  # parsed through the same checks
    fine = {
        "type": "record",
        "name": "Fine",
        "fields": [
            {"name": "empty", "type": {"type": "record", "name": "E", "fields": []}},
            {"name": "again", "type": "E"},  # a named type used twice is no recursion
            {"name": "tags", "type": {"type": "map", "values": "null"}},  # keys take bytes
            {"name": "flags", "type": {"type": "array", "items": "boolean"}},
            {"name": "branches", "type": {"type": "array", "items": ["null", "E"]}},
        ],
    }
    parse_schema_text(json.dumps(fine))


def test_a_schema_too_large_or_too_deep_is_refused() -> None:
    with pytest.raises(InvalidSchemaError, match=f"over {MAX_SCHEMA_BYTES}"):
        parse_schema_text(" " * (MAX_SCHEMA_BYTES + 1))
    with pytest.raises(InvalidSchemaError, match=f"deeper than {MAX_SCHEMA_JSON_DEPTH}"):
        parse_schema_text(DEEP_JSON)


def _schema(i: int) -> str:
    return json.dumps(
        {"type": "record", "name": f"S{i}", "fields": [{"name": "x", "type": "long"}]}
    )


def test_the_registry_keeps_the_most_recently_used_schemas_only() -> None:
    registry = SchemaRegistry(max_schemas=3)
    own = registry.fingerprints()
    added = [registry.register(_schema(i)) for i in range(3)]
    registry.schema_json(added[0])  # used: now the most recent
    late = [registry.register(_schema(i)) for i in range(3, 5)]
    assert registry.evicted == 2
    assert added[0] in registry and late[0] in registry and late[1] in registry
    assert added[1] not in registry and added[2] not in registry
    assert all(fp in registry for fp in own)  # ours are never evicted
    assert len(registry) == len(own) + 3
    for i in range(100):  # a flood keeps the bound
        registry.register(_schema(100 + i))
    assert len(registry) == len(own) + 3 and all(fp in registry for fp in own)
