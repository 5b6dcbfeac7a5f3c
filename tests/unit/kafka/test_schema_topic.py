"""The schemas topic on the guard path: a fingerprint already known costs no lookup (the
broker-backed cases, incremental reads and the negative cache, are in
tests/integration/test_hardening.py)."""

from __future__ import annotations

from streams.kafka.schema_topic import SchemaTopic
from streams.wire.schema_registry import SchemaRegistry


def test_a_registered_fingerprint_needs_no_lookup() -> None:
    registry = SchemaRegistry()
    schemas = SchemaTopic(["127.0.0.1:1"], "lg.schemas", registry)
    assert all(schemas.resolve(fp) for fp in registry.fingerprints())
    assert schemas.lookups == 0 and schemas.missed() == 0 and schemas.fetches == 0
    schemas.close()
