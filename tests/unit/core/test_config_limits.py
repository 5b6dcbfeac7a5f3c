"""Config records past the size and nesting limits are refused in one line (issue 40), never
with a RecursionError, by every reader of the config topic."""

from __future__ import annotations

import json

import pytest

from streams.core.config import ConfigError
from streams.core.config_limits import (
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_RECORD_BYTES,
    MAX_PER_TOOL_ENTRIES,
    value_depth,
)
from streams.core.fleet import GLOBAL_KEY, check_override, override_record, parse_override_record
from streams.kafka.config_topic import ConfigOverrides

DEEP = b"[" * 50_000 + b"]" * 50_000  # issue 40's record: 100 KB


@pytest.mark.parametrize(
    "value",
    [
        DEEP,
        b'{"enabled": ' + DEEP + b"}",
        b'{"perTool": {"x": {"exempt": ' + b"[" * 900 + b"]" * 900 + b"}}}",
    ],
    ids=["bare", "in-a-field", "below-orjson-limit"],
)
def test_a_deeply_nested_record_is_refused_in_one_line(value: bytes) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_override_record(GLOBAL_KEY, value)
    message = str(refused.value)
    assert message.startswith("tools.loopDetection: ")
    assert "\n" not in message and len(message) < 300


def test_the_limit_names_its_constant() -> None:
    nested: object = {}
    for _ in range(MAX_CONFIG_DEPTH):
        nested = {"a": nested}
    with pytest.raises(ConfigError, match="MAX_CONFIG_DEPTH"):
        check_override("agent", {"deviations": nested})


def test_an_oversized_record_is_refused_before_parsing() -> None:
    value = b'{"perTool": {"x": {"exempt": []}}, "pad": "' + b"x" * MAX_CONFIG_RECORD_BYTES + b'"}'
    with pytest.raises(ConfigError, match="MAX_CONFIG_RECORD_BYTES"):
        parse_override_record("agent", value)


def test_too_many_tools_are_refused() -> None:
    table = {f"t{n}": {} for n in range(MAX_PER_TOOL_ENTRIES + 1)}
    with pytest.raises(ConfigError, match="MAX_PER_TOOL_ENTRIES"):
        check_override(GLOBAL_KEY, {"perTool": table})


def test_issue_40s_table_is_within_the_limits() -> None:
    entry = {"warningThreshold": 5, "volatileFields": ["$.details.durationMs"]}
    block = {"enabled": True, "perTool": {f"tool_{n:04d}": entry for n in range(3300)}}
    record = override_record(block)
    assert len(record) < MAX_CONFIG_RECORD_BYTES
    assert parse_override_record(GLOBAL_KEY, record) == block
    assert value_depth(block) == 4  # block, perTool, the entry, its list


def test_an_agent_block_with_incidents_is_refused_on_the_topic() -> None:
    """Incidents are fleet-wide: the follower refuses such a record instead of every event
    of the agent failing to resolve its config."""
    with pytest.raises(ConfigError, match="incidents are fleet-wide"):
        check_override("coder", {"incidents": {"enabled": True}})


def test_the_follower_refuses_the_poison_then_applies_a_good_record() -> None:
    book = ConfigOverrides()
    book.apply(GLOBAL_KEY, override_record({"enabled": True}))
    error = book.apply(GLOBAL_KEY, DEEP)
    assert error is not None and "nested" in str(error)
    assert book.get(GLOBAL_KEY) == {"enabled": True}  # the previous block stays in force
    assert book.apply(GLOBAL_KEY, json.dumps({"warningThreshold": 4}).encode()) is None
    assert book.get(GLOBAL_KEY) == {"warningThreshold": 4}
