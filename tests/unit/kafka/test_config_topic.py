"""Config records as the workers and ``loopguard config show`` apply them: one validator, a bad
record never replaces a good block, tombstones remove, every change bumps the version."""

from __future__ import annotations

import pytest

from streams.core.config import ConfigError
from streams.core.fleet import (
    GLOBAL_KEY,
    FleetConfig,
    check_override,
    override_record,
    parse_override_record,
)
from streams.kafka.config_topic import ConfigOverrides


def test_records_apply_in_order_and_a_bad_one_keeps_the_previous_block() -> None:
    book = ConfigOverrides()
    assert book.apply("coder", override_record({"warningThreshold": 4})) is None
    assert book.get("coder") == {"warningThreshold": 4} and book.version == 1
    error = book.apply("coder", b'{"warningThreshold": "four"}')
    assert isinstance(error, ConfigError)
    assert "agents.list[id=coder].tools.loopDetection.warningThreshold" in str(error)
    assert book.get("coder") == {"warningThreshold": 4} and book.version == 1
    assert book.invalid == {"coder": str(error)}
    assert book.apply("coder", None) is None  # tombstone
    assert book.get("coder") is None and book.invalid == {} and book.version == 2
    assert book.apply(GLOBAL_KEY, b"not json") is not None
    assert "tools.loopDetection: not valid JSON" in book.invalid[GLOBAL_KEY]
    assert book.blocks() == {}


@pytest.mark.parametrize("block", [[1, 2], "x", None])
def test_an_override_must_be_an_object(block) -> None:
    with pytest.raises(ConfigError, match="expected an object"):
        check_override("coder", block)


def test_record_round_trip_and_fleet_merge() -> None:
    block = {"enabled": True, "detectors": {"pingPong": False}}
    assert parse_override_record("a", override_record(block)) == block
    fleet = FleetConfig({"warningThreshold": 5}, {"a": {"criticalThreshold": 30}})
    merged = fleet.with_override(GLOBAL_KEY, {"warningThreshold": 7}).with_override("a", block)
    assert merged.global_block == {"warningThreshold": 7}
    cfg = merged.for_agent("a")
    assert cfg.warning_threshold == 7 and cfg.enabled is True and not cfg.detectors.ping_pong
