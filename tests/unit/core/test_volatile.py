"""perTool volatileFields: path parsing, stripping (against a plain restatement of what a path
names), and results hashed with their volatile fields stripped (issue 17)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from core_helpers import exec_result, sent_result, text_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core.hashing import result_outcome, stripped_result_outcome
from streams.core.volatile import VolatileFields, parse_path, strip_result


def test_parse_path_splits_on_dots():
    assert parse_path("messageId") == ("messageId",)
    assert parse_path("data.items.*.fetchedAt") == ("data", "items", "*", "fetchedAt")


@pytest.mark.parametrize("bad", ["", ".a", "a.", "a..b", " a", "a "])
def test_malformed_paths_are_refused(bad):
    with pytest.raises(ValueError):
        parse_path(bad)


def test_strip_named_key_and_wildcards():
    fields = VolatileFields(["requestId", "data.items.*.fetchedAt", "meta.*"])
    value = {
        "requestId": "r-1",
        "data": {"items": [{"v": 1, "fetchedAt": 5}, {"v": 2, "fetchedAt": 6}, 3]},
        "meta": {"a": 1, "b": 2},
        "keep": {"requestId": "nested, not named"},
    }
    assert fields.strip(value) == {
        "data": {"items": [{"v": 1}, {"v": 2}, 3]},
        "meta": {},
        "keep": {"requestId": "nested, not named"},
    }
    assert value["requestId"] == "r-1"  # the input is never changed


def test_nothing_matched_returns_the_same_object():
    fields = VolatileFields(["absent.path"])
    value = {"a": [1, {"b": 2}]}
    assert fields.strip(value) is value


def test_a_path_ending_at_array_items_empties_the_array():
    assert VolatileFields(["tags.*"]).strip({"tags": [1, 2], "x": 1}) == {"tags": [], "x": 1}


def test_strip_result_reaches_details_and_json_text_content():
    payload = {"title": "t", "fetchedAt": "2026-01-01T00:00:00Z"}
    result = {"content": [{"type": "text", "text": json.dumps(payload)}], "details": payload}
    stripped = strip_result(result, VolatileFields(["fetchedAt"]))
    assert stripped["details"] == {"title": "t"}
    assert json.loads(stripped["content"][0]["text"]) == {"title": "t"}
    # "details.fetchedAt" (from the result itself) names the same field of details
    assert strip_result(result, VolatileFields(["details.fetchedAt"]))["details"] == {"title": "t"}


def test_text_that_is_not_json_is_left_as_it_is():
    result = text_result("fetched at 12:00", fetchedAt=1)
    stripped = strip_result(result, VolatileFields(["fetchedAt"]))
    assert stripped["content"] == result["content"]
    assert stripped["details"] == {}


# -- a plain restatement: which leaves a set of paths removes --------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["x", "y"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c", "ts"]), children, max_size=3)
    ),
    max_leaves=20,
)
path_texts = st.lists(st.sampled_from(["a", "b", "c", "ts", "*"]), min_size=1, max_size=3).map(
    ".".join
)


def leaves(value: Any, at: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """Every scalar or empty container, by its location (keys and list indices)."""
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in leaves(item, (*at, key)).items()}
    if isinstance(value, list) and value:
        return {k: v for i, item in enumerate(value) for k, v in leaves(item, (*at, i)).items()}
    return {at: value}


def named(location: tuple[Any, ...], paths: list[str]) -> bool:
    """A location lies at or under what a path names: each segment equals the key, or is
    ``*`` (any key or list index); a named segment never matches a list index."""
    for text in paths:
        segments = text.split(".")
        if len(segments) <= len(location) and all(
            seg == "*" or (isinstance(loc, str) and seg == loc)
            for seg, loc in zip(segments, location, strict=False)
        ):
            return True
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.lists(path_texts, min_size=1, max_size=3))
def test_strip_removes_exactly_the_named_fields(value, paths):
    stripped = VolatileFields(paths).strip(value)
    before, after = leaves(value), leaves(stripped)
    for location, leaf in after.items():
        if location in before:
            assert before[location] == leaf  # kept leaves are unchanged
            assert not named(location, paths)  # and none of them is named
        else:  # a container emptied by stripping: all it held was named
            assert leaf in ({}, [])
            assert all(named(loc, paths) for loc in before if loc[: len(location)] == location)
    for location in before:
        if not named(location, paths):
            assert location in after  # nothing unnamed is dropped


# -- hashing ---------------------------------------------------------------------------------


def _hash(tool: str, result: Any, paths: list[str] | None, action: str | None = None) -> str:
    text = json.dumps(result)
    if paths is None:
        return result_outcome(tool, action, text, None).result_hash
    return stripped_result_outcome(tool, action, text, None, VolatileFields(paths)).result_hash


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "title"]), json_values, max_size=3),
    st.lists(st.integers(), min_size=2, max_size=4, unique=True),
)
def test_results_differing_only_in_a_named_field_hash_alike(base, stamps):
    results = [
        {"details": {**base, "data": {"fetchedAt": stamp}}, "content": []} for stamp in stamps
    ]
    assert len({_hash("web_fetch", r, None) for r in results}) == len(stamps)
    assert len({_hash("web_fetch", r, ["data.fetchedAt"]) for r in results}) == 1


def test_stripping_keeps_the_exec_and_send_rules():
    # exec: the exit code still counts, the masking of clock times still applies
    first = exec_result("12:00:01 done", traceId="t-1")
    second = exec_result("12:00:02 done", traceId="t-2")
    assert _hash("exec", first, ["traceId"]) == _hash("exec", second, ["traceId"])
    assert _hash("exec", first, ["traceId"]) != _hash("exec", exec_result("done", exit_code=1), [])
    # sends: the built-in ids are still dropped, and a named field on top of them
    a = sent_result("hi", "m-1", deliveryToken="x")
    b = sent_result("hi", "m-2", deliveryToken="y")
    assert _hash("slack_send", a, None) != _hash("slack_send", b, None)
    assert _hash("slack_send", a, ["deliveryToken"]) == _hash("slack_send", b, ["deliveryToken"])


def test_errors_and_unparseable_results_hash_as_today():
    fields = VolatileFields(["x"])
    assert (
        stripped_result_outcome("t", None, None, "boom", fields).result_hash
        == result_outcome("t", None, None, "boom").result_hash
    )
    for text in ["not json {", '"a string"', "42", "null"]:
        assert (
            stripped_result_outcome("t", None, text, None, fields).result_hash
            == result_outcome("t", None, text, None).result_hash
        )


def test_the_memo_tells_paths_apart():
    result = json.dumps({"details": {"a": 1, "b": 2}})
    by_a = stripped_result_outcome("t", None, result, None, VolatileFields(["a"])).result_hash
    by_b = stripped_result_outcome("t", None, result, None, VolatileFields(["b"])).result_hash
    plain = result_outcome("t", None, result, None).result_hash
    assert len({by_a, by_b, plain}) == 3
