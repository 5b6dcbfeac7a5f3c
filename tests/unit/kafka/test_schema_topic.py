"""The schemas topic on the guard path: a fingerprint already known costs no lookup (the
broker-backed cases, incremental reads and the negative cache, are in
tests/integration/test_hardening.py)."""

from __future__ import annotations

from streams.core.events import Envelope, ToolCall
from streams.kafka.lookup_quota import LookupQuota
from streams.kafka.schema_topic import SchemaTopic
from streams.wire.avro import encode_event
from streams.wire.envelope_peek import UNKNOWN_PRODUCER, claimed_gateway
from streams.wire.schema_registry import SchemaRegistry


def test_a_registered_fingerprint_needs_no_lookup() -> None:
    registry = SchemaRegistry()
    schemas = SchemaTopic(["127.0.0.1:1"], "lg.schemas", registry)
    assert all(schemas.resolve(fp) for fp in registry.fingerprints())
    assert schemas.lookups == 0 and schemas.missed() == 0 and schemas.fetches == 0
    schemas.close()


def test_lookups_are_shared_out_per_producer_and_bounded_for_the_fleet() -> None:
    """Issue 40: a producer's unknown ids spend its own lookups (and the fleet's), not
    another gateway's. No refill during the test (rates of ~0)."""
    quota = LookupQuota(
        producer_burst=3, producer_per_second=1e-9, fleet_burst=5, fleet_per_second=1e-9
    )
    assert [quota.take("flooder") for _ in range(5)] == [True, True, True, False, False]
    assert quota.take("victim") and quota.take("victim")  # its own bucket, the fleet's last two
    assert not quota.take("victim") and not quota.take("third")  # the fleet's bound holds
    assert quota.refused == 4
    many = LookupQuota(max_producers=2)
    for name in ("a", "b", "c"):
        many.take(name)
    assert list(many.producers) == ["b", "c"]  # producers remembered: bounded too


def test_a_lookup_over_quota_touches_no_broker() -> None:
    schemas = SchemaTopic(
        ["127.0.0.1:1"], "lg.schemas", SchemaRegistry(), quota=LookupQuota(producer_burst=0)
    )
    assert not schemas.resolve(b"\x01" * 8, "flooder")
    assert schemas.fetches == 0 and schemas.quota.refused == 1
    assert schemas.known_missing(b"\x01" * 8)  # a miss for now: its event is dead-lettered
    schemas.close()


def test_the_gateway_an_event_names_is_read_without_its_schema() -> None:
    value = encode_event(ToolCall(Envelope("run", "agent", "gw-é", 1, 1), "exec", "{}"))
    assert claimed_gateway(value) == "gw-é"
    unknown_writer = value[:2] + b"\x07" * 8 + value[10:]  # an id nobody registered
    assert claimed_gateway(unknown_writer) == "gw-é"
    assert claimed_gateway(value[:14]) == UNKNOWN_PRODUCER  # cut short
    assert claimed_gateway(b"junk") == claimed_gateway(None) == UNKNOWN_PRODUCER
    huge = value[:10] + b"\xfe\xff\xff\xff\x0f" + b"x" * 10  # a length past NAME_MAX_BYTES
    assert claimed_gateway(huge) == UNKNOWN_PRODUCER
