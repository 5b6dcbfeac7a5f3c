"""Writer schemas that no datum can abuse: checked before a schema is registered.

A writer schema comes from whoever can write to the schemas topic, and fastavro reads a
datum the way its writer schema says (issue 40). Two shapes turn a small message into an
unbounded read: a recursive type (a record that holds itself, ``["null", "N"]``: each level
costs a byte, and 200,000 of them overflow the C stack of fastavro's compiled reader, which
ends the process, no exception), and an array whose items take no bytes (``array<null>``:
five bytes claim 50 million items, a 400 MB list). Both are refused, so every datum a
registered schema reads is nested no deeper than its schema and holds no more items than its
message has bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.wire.errors import InvalidSchemaError

# A schema's JSON nested deeper than this is refused before fastavro parses it (ours nest 9
# levels; every Avro type level costs two or three levels of JSON).
MAX_SCHEMA_JSON_DEPTH = 64
# A schema's JSON larger than this is refused (ours are under 5 KB).
MAX_SCHEMA_BYTES = 256 * 1024

_ZERO_SIZED_PRIMITIVES = frozenset(("null",))
_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))


def check_schema_shape(parsed: Any, named: Mapping[str, Any]) -> None:
    """Refuse (:class:`InvalidSchemaError`) a fastavro-parsed schema with a recursive named
    type or an array of items that encode to no bytes; ``named``: its named types."""
    _Walk(named).size_free(parsed)


class _Walk:
    """One walk over a schema, each named type once (a type used many times costs once)."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named
        self.open: set[str] = set()  # named types whose definition is being walked
        self.done: dict[str, bool] = {}  # named type -> whether it encodes to no bytes

    def size_free(self, node: Any) -> bool:
        """Whether ``node`` can encode to zero bytes; raises on a forbidden shape."""
        if isinstance(node, str):
            if node in self.named:
                return self.named_type(node, self.named[node])
            return node in _ZERO_SIZED_PRIMITIVES
        if isinstance(node, list):  # a union: its branch index takes a byte at least
            for branch in node:
                self.size_free(branch)
            return False
        if not isinstance(node, dict):
            return False
        kind = node.get("type")
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return kind in _ZERO_SIZED_PRIMITIVES
        if kind in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
            return self.named_type(node["name"], node)
        if kind == "array":
            if self.size_free(node.get("items")):
                raise InvalidSchemaError(
                    "invalid Avro schema: an array's items take no bytes (a few bytes could "
                    "claim millions of them)"
                )
            return False
        if kind == "map":  # each entry's key is a string: a byte at least
            self.size_free(node.get("values"))
            return False
        return self.size_free(kind)

    def named_type(self, name: str, definition: Any) -> bool:
        if name in self.done:
            return self.done[name]
        if name in self.open:
            raise InvalidSchemaError(
                f"invalid Avro schema: type {name} holds itself (recursive types are refused)"
            )
        self.open.add(name)
        kind = definition.get("type") if isinstance(definition, dict) else None
        if kind in ("record", "error"):
            fields = [self.size_free(field.get("type")) for field in definition["fields"]]
            free = all(fields)  # every field walked: a recursion may hide in any of them
        elif kind == "fixed":
            free = definition.get("size") == 0
        else:  # an enum's symbol index takes a byte
            free = False
        self.open.discard(name)
        self.done[name] = free
        return free
