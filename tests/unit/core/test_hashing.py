"""What counts as "the same call" and "the same result"."""

from __future__ import annotations

import json

import pytest
from core_helpers import Run, exec_result, loop_guard, sent_result, text_result
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.canonical import (
    MAX_FALLBACK_DEPTH,
    UNDEFINED,
    NestedTooDeepError,
    canonical_json,
    digest,
    parse_json,
)
from streams.core.events import ToolCall, ToolResult
from streams.core.hashing import args_hash, is_known_poll_call
from streams.core.outcomes import is_outbound_send, outcome_hash, unknown_tool_name


def rh(tool, params, result=None, error=None):
    """Result hash the way the engine computes it from JSON text."""
    text = None if result is None else json.dumps(result)
    return outcome_hash(tool, params, parse_json(text), error).result_hash


def ah(tool, args_text):
    return args_hash(tool, parse_json(args_text))


# -- key order ---------------------------------------------------------------------------


def test_key_order_never_matters_for_args():
    a = '{"path": "/tmp", "opts": {"x": 1, "y": [1, {"b": 2, "a": 1}]}, "n": null}'
    b = '{"n": null, "opts": {"y": [1, {"a": 1, "b": 2}], "x": 1}, "path": "/tmp"}'
    assert ah("read", a) == ah("read", b)
    assert ah("read", a) != ah("read", a.replace('"/tmp"', '"/var"'))


def test_key_order_never_matters_for_results():
    r1 = {"details": {"a": 1, "b": {"c": [1, 2], "d": "x"}}, "content": []}
    r2 = {"content": [], "details": {"b": {"d": "x", "c": [1, 2]}, "a": 1}}
    assert rh("read", {}, r1) == rh("read", {}, r2)


def test_list_order_does_matter():
    assert ah("t", '{"a": [1, 2]}') != ah("t", '{"a": [2, 1]}')


def test_whitespace_and_escapes_do_not_matter():
    assert ah("t", '{"a":"é","b":1}') == ah("t", '{ "b" : 1 ,\n "a" : "\\u00e9" }')


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=10,
        ),
        max_size=6,
    ),
    st.randoms(use_true_random=False),
)
def test_key_order_property(params, rnd):
    def shuffled(value):
        if isinstance(value, dict):
            items = list(value.items())
            rnd.shuffle(items)
            return {k: shuffled(v) for k, v in items}
        if isinstance(value, list):
            return [shuffled(v) for v in value]
        return value

    other = shuffled(params)
    assert ah("t", json.dumps(params)) == ah("t", json.dumps(other))
    assert rh("t", {}, {"details": params}) == rh("t", {}, {"details": other})


def test_args_hash_names_the_tool():
    assert ah("read", "{}").startswith("read:")
    assert ah("read", "{}") != ah("write", "{}")


# -- exec --------------------------------------------------------------------------------

EXEC = {"command": "make test"}
POLL = {"action": "poll", "sessionId": "s-1"}


def test_exec_ignores_volatile_metadata():
    base = rh("exec", EXEC, exec_result("3 passed"))
    other = exec_result("3 passed", durationMs=98765, pid=1, sessionId="other", cwd="/elsewhere")
    assert rh("exec", EXEC, other) == base


def test_exec_ignores_clock_times_and_pids_in_output():
    one = "2024-05-01T10:00:00Z build started (pid 4242)\n[10:00:01] ok, took 35ms\ndone"
    two = "2024-05-02 11:22:33.456+02:00 build started (pid 777)\n[11:22:34] ok, took 1.5s\ndone"
    assert rh("exec", EXEC, exec_result(one)) == rh("exec", EXEC, exec_result(two))


def test_exec_running_tail_ignores_timestamps():
    running = {"details": {"status": "running", "tail": "12:00:01 waiting", "pid": 1}}
    later = {"details": {"status": "running", "tail": "12:00:09 waiting", "pid": 2}}
    assert rh("exec", EXEC, running) == rh("exec", EXEC, later)
    moved = {"details": {"status": "running", "tail": "12:00:09 compiling"}}
    assert rh("exec", EXEC, running) != rh("exec", EXEC, moved)


@pytest.mark.parametrize(
    "change",
    [
        {"status": "failed"},
        {"exit_code": 1},
        {"exit_code": None},
        {"timed_out": True},
        {"output": "4 passed"},
        {"output": "3 passed, 1 warning"},
    ],
)
def test_exec_hash_changes_with_real_outcome(change):
    kwargs = {"output": "3 passed", "status": "completed", "exit_code": 0, "timed_out": False}
    kwargs.update(change)
    assert rh("exec", EXEC, exec_result(**kwargs)) != rh("exec", EXEC, exec_result("3 passed"))


def test_exec_uses_text_when_aggregated_is_missing():
    a = {
        "details": {"status": "completed", "exitCode": 0, "pid": 1},
        "content": [{"type": "text", "text": "hello"}],
    }
    b = {
        "details": {"status": "completed", "exitCode": 0, "pid": 2},
        "content": [{"type": "text", "text": "hello"}],
    }
    c = {
        "details": {"status": "completed", "exitCode": 0},
        "content": [{"type": "text", "text": "bye"}],
    }
    assert rh("exec", EXEC, a) == rh("exec", EXEC, b) != rh("exec", EXEC, c)


def test_exec_output_is_trimmed_as_the_reference_does():
    assert rh("exec", EXEC, exec_result("ok")) == rh("exec", EXEC, exec_result("ok\n"))
    assert rh("exec", EXEC, exec_result("ok")) == rh("exec", EXEC, exec_result("  ok \r\n"))
    # JavaScript's trim: U+FEFF is whitespace, U+001C and U+0085 are not (unlike str.strip)
    assert rh("exec", EXEC, exec_result("ok")) == rh("exec", EXEC, exec_result("\ufeffok"))
    assert rh("exec", EXEC, exec_result("ok")) != rh("exec", EXEC, exec_result("ok\x1c"))
    assert rh("exec", EXEC, exec_result("ok")) != rh("exec", EXEC, exec_result("ok\x85"))
    assert rh("exec", EXEC, exec_result("ok")) != rh("exec", EXEC, exec_result("o k"))


@pytest.mark.parametrize("blank", ["", "   ", "\n\t", None, 5, ["x"]])
def test_exec_blank_aggregated_falls_back_to_the_text_content(blank):
    def result(aggregated, text):
        return {
            "details": {"status": "completed", "exitCode": 0, "aggregated": aggregated},
            "content": [{"type": "text", "text": text}],
        }

    assert rh("exec", EXEC, result(blank, "hello")) == rh("exec", EXEC, result("hello", "x"))
    assert rh("exec", EXEC, result(blank, "hello")) != rh("exec", EXEC, result(blank, "bye"))


def test_exec_exit_codes_are_numbers_as_in_javascript():
    def code(value):
        return rh("exec", EXEC, exec_result("boom", status="failed", exit_code=value))

    assert code(1.0) == code(1) != code(2.0) == code(2)  # 1.0 was read as null
    assert code(1) != code(None) and code(2) != code(None)
    assert code(1.5) != code(1) and code(1.5) != code(None)
    assert code(True) == code(None) == code("1")  # not numbers: null, as typeof says


def test_exec_rules_accept_any_json_in_any_field():
    # was TypeError: argument of type 'int' is not iterable (normalize_output)
    for details in (
        {"status": "running", "tail": 5},
        {"status": "running", "tail": None},
        {"status": "running", "tail": {"a": [1]}},
        {"status": "completed", "aggregated": 5, "exitCode": "x", "timedOut": "yes"},
        {"status": ["completed"]},
        {"status": "approval-pending", "command": 5, "host": [1], "reason": {}},
    ):
        assert rh("exec", EXEC, {"details": details, "content": 7}) is not None
    assert rh("exec", EXEC, {"details": {"status": "running", "tail": 5}}) == rh(
        "exec", EXEC, {"details": {"status": "running"}}
    )


def test_exec_approval_pending_hashes_its_facts():
    a = {"details": {"status": "approval-pending", "command": "rm -rf /", "host": "h", "id": 1}}
    b = {"details": {"status": "approval-pending", "command": "rm -rf /", "host": "h", "id": 2}}
    c = {"details": {"status": "approval-pending", "command": "ls", "host": "h"}}
    assert rh("exec", EXEC, a) == rh("exec", EXEC, b) != rh("exec", EXEC, c)


def test_exec_normalisation_only_applies_to_exec():
    one = text_result("at 10:00:01")
    two = text_result("at 10:00:02")
    assert rh("read", {}, one) != rh("read", {}, two)


# -- process poll / log ------------------------------------------------------------------


def test_process_poll_hashes_status_exit_and_output():
    poll = {"action": "poll", "sessionId": "s1"}
    base = {"details": {"status": "running", "aggregated": "", "pid": 1, "durationMs": 5}}
    same = {"details": {"status": "running", "aggregated": "", "pid": 2, "durationMs": 9}}
    assert rh("process", poll, base) == rh("process", poll, same)
    for change in ({"status": "exited"}, {"aggregated": "line"}, {"exitCode": 0}):
        moved = {"details": {**base["details"], **change}}
        assert rh("process", poll, moved) != rh("process", poll, base), change


def test_process_log_hashes_counts():
    log = {"action": "log", "sessionId": "s1"}
    base = {"details": {"status": "running", "totalLines": 10, "totalChars": 100, "pid": 1}}
    same = {"details": {"status": "running", "totalLines": 10, "totalChars": 100, "pid": 9}}
    grown = {"details": {"status": "running", "totalLines": 11, "totalChars": 120}}
    assert rh("process", log, base) == rh("process", log, same) != rh("process", log, grown)


def test_poll_and_log_hash_differently():
    result = {"details": {"status": "running"}}
    assert rh("process", {"action": "poll"}, result) != rh("process", {"action": "log"}, result)


def test_known_poll_classification():
    assert is_known_poll_call("command_status", {})
    assert is_known_poll_call("process", {"action": "poll"})
    assert is_known_poll_call("process", {"action": "log"})
    assert not is_known_poll_call("process", {"action": "kill"})
    assert not is_known_poll_call("process", "poll")
    assert not is_known_poll_call("exec", {"action": "poll"})


# -- outbound message sends --------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "params"),
    [
        ("message", {"action": "send", "to": "#ops", "text": "deploy done"}),
        ("message", {"action": "reply", "to": "#ops"}),
        ("sessions_send", {"sessionKey": "s", "message": "hi"}),
        ("conversations_send", {"conversationRef": "c", "text": "hi"}),
        ("conversations_turn", {"conversationRef": "c", "text": "hi"}),
        ("conversations_turn", {}),  # always a send, as in the reference, whatever its args
        ("conversations_turn", []),
        ("telegram_send", {"chatId": 1, "text": "hi"}),
        ("slack_message", {"action": "send"}),
    ],
)
def test_sends_strip_volatile_ids(tool, params):
    assert is_outbound_send(tool, params)
    a = sent_result("deploy done", "m-1", fileId="f-1", sentAt=1, runId="r-1")
    b = sent_result("deploy done", "m-2", fileId="f-2", sentAt=2, runId="r-2")
    b["details"]["timestamp"] = 1_800_000_000_000
    assert rh(tool, params, a) == rh(tool, params, b)
    different_text = sent_result("deploy failed", "m-3")
    assert rh(tool, params, a) != rh(tool, params, different_text)


def test_send_strips_ids_inside_nested_delivery_objects():
    params = {"action": "send"}

    def delivered(msg_id, ts):
        return {
            "details": {
                "ok": True,
                "deliveries": [{"platformMessageId": msg_id, "ts": ts, "channel": "c"}],
                "message": {"id": msg_id, "text": "hi", "direction": "out"},
                "conversation": {"id": "room-1"},
            }
        }

    assert rh("message", params, delivered("a", 1)) == rh("message", params, delivered("b", 2))
    other_room = delivered("a", 1)
    other_room["details"]["conversation"]["id"] = "room-2"  # a stable id is kept
    assert rh("message", params, other_room) != rh("message", params, delivered("a", 1))


@pytest.mark.parametrize(
    ("tool", "params"),
    [
        ("message", {"action": "read", "channel": "c"}),
        ("message", {}),
        ("slack_message", {"action": "read"}),
        ("read", {}),
    ],
)
def test_non_send_keeps_ids(tool, params):
    assert not is_outbound_send(tool, params)
    a = sent_result("x", "m-1")
    b = sent_result("x", "m-2")
    assert rh(tool, params, a) != rh(tool, params, b)


def test_repeated_identical_sends_block_in_the_engine():
    lg = loop_guard(enabled=True, warningThreshold=2, criticalThreshold=3)
    run = Run(lg)
    params = {"action": "send", "to": "#ops", "text": "deploy done"}
    for i in range(4):
        run.plain_cycle("message", params, sent_result("deploy done", f"m-{i}", timestamp=i))
    assert [d.action.value for d in run.decisions] == ["warn", "block"]


# -- errors and unknown tools ------------------------------------------------------------


def test_errors_hash_their_message():
    assert rh("read", {}, error="ENOENT") == rh("read", {}, error="ENOENT")
    assert rh("read", {}, error="ENOENT") != rh("read", {}, error="EACCES")
    assert rh("read", {}, error="ENOENT").startswith("error:")
    # an error wins over whatever result came with it
    assert rh("read", {}, text_result("x"), error="ENOENT") == rh("read", {}, error="ENOENT")
    assert rh("read", {}, error="ENOENT") != rh("read", {}, text_result("ENOENT"))


@pytest.mark.parametrize(
    ("error", "name"),
    [
        ("unknown tool X", "x"),
        ("Unknown tool: 'X'", "x"),
        ('Unknown tool: "web.search"', "web.search"),
        ("unknown tool:browser_open", "browser_open"),
        ("tool X not found", "x"),
        ("Tool 'fetch-url' not found in registry", "fetch-url"),
        ("tool X is not available", "x"),
        ("Error: tool grep is not available in this sandbox", "grep"),
        ("permission denied", None),
        ("file not found", None),
        ("", None),
    ],
)
def test_unknown_tool_extraction(error, name):
    assert unknown_tool_name(error) == name
    assert outcome_hash("x", {}, None, error).unknown_tool == name


def test_ok_results_name_no_unknown_tool():
    assert outcome_hash("x", {}, {"details": {}}, None).unknown_tool is None


# -- update_plan -------------------------------------------------------------------------


def plan(*steps, explanation="why"):
    return {"explanation": explanation, "plan": [{"step": s, "status": st} for s, st in steps]}


def test_update_plan_wording_churn_is_ignored():
    a = plan(("write tests", "in_progress"), ("ship", "pending"))
    b = plan(("Write the tests!", "in_progress"), ("Ship it", "pending"), explanation="other")
    assert args_hash("update_plan", a) == args_hash("update_plan", b)
    assert rh(
        "update_plan", a, {"details": a, "content": [{"type": "text", "text": "ok 1"}]}
    ) == rh("update_plan", b, {"details": b, "content": [{"type": "text", "text": "ok 2"}]})


def test_update_plan_status_change_is_progress():
    a = plan(("write tests", "in_progress"), ("ship", "pending"))
    b = plan(("write tests", "completed"), ("ship", "in_progress"))
    c = plan(("write tests", "in_progress"))
    assert args_hash("update_plan", a) != args_hash("update_plan", b)
    assert args_hash("update_plan", a) != args_hash("update_plan", c)
    assert args_hash("update_plan", a) != args_hash("update_plan", plan(*[], explanation=""))
    assert rh("update_plan", a, {"details": a}) != rh("update_plan", b, {"details": b})


def test_update_plan_odd_shapes():
    assert args_hash("update_plan", {"plan": "nope"}) == args_hash("update_plan", {})
    assert args_hash("update_plan", [1, 2]) == args_hash("update_plan", [1, 2])
    assert args_hash("update_plan", {"plan": [1, {"step": " "}]}) == args_hash(
        "update_plan", {"plan": [2, {"step": ""}]}
    )


# -- other tools, odd payloads -----------------------------------------------------------


def test_other_tools_hash_details_and_text():
    base = text_result("body", size=3)
    assert rh("read", {}, base) == rh("read", {}, text_result("body", size=3))
    assert rh("read", {}, base) != rh("read", {}, text_result("body2", size=3))
    assert rh("read", {}, base) != rh("read", {}, text_result("body", size=4))
    image = {"content": [{"type": "image", "data": "AAA"}, {"type": "text", "text": "body"}]}
    image2 = {"content": [{"type": "image", "data": "BBB"}, {"type": "text", "text": "body"}]}
    assert rh("read", {}, image) == rh("read", {}, image2)  # only text content counts


def test_process_poll_missing_status_is_not_a_null_status():
    # The reference hashes ``status: details.status`` without ``?? null``: a missing status
    # is JavaScript's undefined, not null (its other fields do use ``?? null``).
    missing = {"details": {"exitCode": None}, "content": []}
    null = {"details": {"status": None, "exitCode": None}, "content": []}
    assert rh("process", POLL, missing) != rh("process", POLL, null)
    assert rh("process", POLL, missing) == rh("process", POLL, {"details": {}})
    assert rh("process", {"action": "log"}, missing) != rh("process", {"action": "log"}, null)
    assert canonical_json({"status": UNDEFINED}) == b'{"status":undefined}'


def test_non_object_results():
    assert rh("t", {}, "plain") == rh("t", {}, "plain") != rh("t", {}, "other")
    assert rh("t", {}, [1, 2]) != rh("t", {}, [2, 1])
    assert outcome_hash("t", {}, parse_json("not json at all"), None).result_hash is not None
    assert outcome_hash("t", {}, parse_json(None), None).result_hash is None  # no result
    # JSON null is an outcome (the reference hashes it): a tool that keeps returning null
    # can block and trip the breaker like any other
    assert rh("t", {}, None) is None
    null = outcome_hash("t", {}, parse_json("null"), None).result_hash
    assert null is not None and null == outcome_hash("t", {}, None, None).result_hash
    assert null != outcome_hash("t", {}, parse_json('"null"'), None).result_hash
    assert null != outcome_hash("t", {}, parse_json("{}"), None).result_hash


def test_loop_veto_is_reported_not_hashed():
    veto = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
    out = outcome_hash("exec", EXEC, veto, None)
    assert out.loop_veto and out.result_hash is None
    other = {"details": {"status": "blocked", "deniedReason": "approval"}}
    assert not outcome_hash("exec", EXEC, other, None).loop_veto
    assert outcome_hash("exec", EXEC, other, None).result_hash is not None


def test_unicode_args():
    a = '{"q": "naïve café 日本語 🚀", "emoji": "\\ud83d\\ude80"}'
    b = '{"emoji": "🚀", "q": "naïve café 日本語 🚀"}'
    assert ah("search", a) == ah("search", b)
    assert ah("search", a) != ah("search", '{"q": "naive cafe", "emoji": "🚀"}')
    # a lone surrogate is valid JSON text and must not crash the hash
    assert ah("search", '{"q": "\\ud800"}') != ah("search", '{"q": "\\ud801"}')


def test_empty_args():
    assert ah("t", "{}") == args_hash("t", {})
    assert ah("t", "{}") != ah("t", "[]")
    assert ah("t", "{}") != ah("t", "null")
    assert ah("t", "") == ah("t", "")  # empty text is hashed as the text it is


def test_huge_args():
    big = "x" * (1 << 20)
    text = json.dumps({"blob": big})
    h = ah("write", text)
    assert h == ah("write", text)
    assert h != ah("write", json.dumps({"blob": big[:-1] + "y"}))
    assert len(h) == len("write:") + 64


def test_deeply_nested_args():
    def nested(depth, leaf):
        value = leaf
        for _ in range(depth):
            value = {"k": value}
        return json.dumps(value)

    assert ah("t", nested(200, 1)) == ah("t", nested(200, 1))
    assert ah("t", nested(200, 1)) != ah("t", nested(200, 2))
    assert ah("t", nested(200, 1)) != ah("t", nested(199, 1))
    deep_list = "[" * 200 + "]" * 200
    assert ah("t", deep_list) == ah("t", deep_list)


def test_non_json_args_text():
    assert ah("t", "not json {") == ah("t", "not json {")
    assert ah("t", "not json {") != ah("t", "not json }")
    assert ah("t", '"{}"') != ah("t", "{}")  # a JSON string is not an object
    assert parse_json("{broken") == "{broken"


# -- numbers, as JavaScript holds them ---------------------------------------------------


def test_integral_floats_are_the_same_call_as_ints():
    # {limit: 1} from a TypeScript gateway, {limit: 1.0} from a Python one: one call
    assert ah("read", '{"limit": 1}') == ah("read", '{"limit": 1.0}') == ah("read", '{"limit":1e0}')
    assert ah("read", '{"limit": 1}') != ah("read", '{"limit": 1.5}')
    assert ah("read", '{"limit": [2.0, {"n": -0.0}]}') == ah("read", '{"limit": [2, {"n": 0}]}')
    assert ah("read", '{"n": 10000000000000000}') == ah("read", '{"n": 1e16}')
    # beyond 2**53 JavaScript reads the nearest double: these two are one number there
    assert ah("t", '{"n": 12345678901234567890}') == ah("t", '{"n": 12345678901234567000}')
    assert ah("t", '{"n": 9007199254740993}') == ah("t", '{"n": 9007199254740992}')
    assert ah("t", '{"n": 9007199254740991}') != ah("t", '{"n": 9007199254740992}')
    # NaN, Infinity (standard library path) and 1e400 are written null by JSON.stringify
    assert ah("t", '{"n": NaN}') == ah("t", '{"n": 1e400}') == ah("t", '{"n": null}')
    assert rh("t", {}, {"details": {"n": 3.0}}) == rh("t", {}, {"details": {"n": 3}})


@pytest.mark.parametrize(
    ("python", "javascript"),
    [  # left: as a Python gateway writes the value; right: JSON.stringify(JSON.parse(left))
        ("1.0", "1"),
        ("-0.0", "0"),
        ("100.0", "100"),
        ("1e15", "1000000000000000"),
        ("9007199254740992.0", "9007199254740992"),
        ("1e+16", "10000000000000000"),
        ("1152921504606846976", "1152921504606847000"),
        ("12345678901234567890", "12345678901234567000"),
        ("18446744073709551616", "18446744073709552000"),  # beyond 64 bits
        ("1e+21", "1e21"),
        ("2.5e-06", "0.0000025"),
        ("0.1", "0.1"),
        ("NaN", "null"),
        ("Infinity", "null"),
        ("1e400", "null"),
        ('[1.0, 2.5e+300, {"n": 3.0}]', '[1, 2.5e+300, {"n": 3}]'),
    ],
)
def test_numbers_are_the_doubles_javascript_holds(python, javascript):
    assert canonical_json(parse_json(python)) == canonical_json(parse_json(javascript))
    assert canonical_json(parse_json(f'{{"a": {python}}}')) == canonical_json(
        parse_json(f'{{"a": {javascript}}}')
    )


def test_canonical_numbers():
    assert canonical_json(parse_json("[1.0, -0.0, 0.5, 1e400]")) == b"[1,0,0.5,null]"
    assert canonical_json(parse_json("[12345678901234567890]")) == (
        canonical_json([float(12345678901234567890)])
    )
    assert canonical_json({"n": 2**53}) == b'{"n":9007199254740992}'
    value = {"a": [1.0, {"b": 2**60}]}
    canonical_json(value)
    assert type(value["a"][0]) is float and value["a"][1]["b"] == 2**60  # left unchanged
    assert canonical_json(parse_json('{"a": 1.05}')) == b'{"a":1.05}'  # ".0", not integral


def test_canonical_json_is_compact_and_sorted():
    assert canonical_json({"b": 1, "a": [1, {"d": None, "c": "é"}]}) == (
        '{"a":[1,{"c":"é","d":null}],"b":1}'.encode()
    )


@pytest.mark.parametrize(
    "value",
    [
        {"big": 2**70, "z": 1},  # beyond 64-bit: orjson refuses, stdlib path takes it
        {"lone": "\ud800", "a": 1},  # lone surrogate
        {"nested": [[[["deep"]]]], "k": float("inf")},
    ],
)
def test_canonical_json_fallback_is_still_canonical(value):
    shuffled = dict(reversed(list(value.items())))
    assert canonical_json(value) == canonical_json(shuffled)
    assert digest(value) == digest(shuffled)


def test_odd_payloads_through_the_engine():
    lg = loop_guard(enabled=True, warningThreshold=2)
    run = Run(lg)
    for args in ("not json", "", "[1,2]", "null", '"str"', json.dumps({"x": "y" * 100_000})):
        for _ in range(3):
            env = run.envelope()
            lg.process(ToolCall(env, "odd", args))
            lg.process(ToolResult(run.envelope(), "odd", args, "not json either"))
    state = lg.runs[run.run_id]
    assert len(state.history) == 18
    assert all(not r.pending for r in state.history.records)


def test_deeply_nested_send_result_does_not_crash():
    lg = loop_guard(enabled=True)
    run = Run(lg)
    details = {"ok": True}
    for _ in range(600):
        details = {"k": details}
    run.call("message", {"action": "send", "text": "x"})
    run.result("message", {"action": "send", "text": "x"}, {"details": details})
    assert not lg.runs[run.run_id].history.records[-1].pending


def test_any_parseable_nesting_depth_does_not_crash():
    crashed = []
    for depth in range(850, 1001):
        lg = loop_guard(enabled=True)
        run = Run(lg)
        text = '{"a":' * depth + "1" + "}" * depth
        try:
            lg.process(ToolCall(run.envelope(), "read", text))
            lg.process(ToolResult(run.envelope(), "read", text, text))
        except RecursionError:
            crashed.append(depth)
    assert crashed == []


def _at_stack_depth(frames: int, fn):
    """Call ``fn`` with ``frames`` extra Python frames below it."""
    if frames == 0:
        return fn()
    return _at_stack_depth(frames - 1, fn)


@pytest.mark.parametrize("depth", [300, MAX_FALLBACK_DEPTH, MAX_FALLBACK_DEPTH + 1, 990, 1024])
def test_nested_hash_does_not_depend_on_the_callers_stack(depth):
    """Worker and replay call the hasher from different stack depths; the answer for JSON
    nested near Python's recursion limit must not change with it (NaN forces the standard
    library path, which recurses)."""
    text = "[" * depth + "NaN" + "]" * depth

    def hashes():
        lg = loop_guard(enabled=True)
        run = Run(lg)
        lg.process(ToolCall(run.envelope(), "read", text))
        lg.process(ToolResult(run.envelope(), "read", text, text))
        record = lg.runs[run.run_id].history.records[-1]
        return record.sig, record.result_hash

    assert _at_stack_depth(0, hashes) == _at_stack_depth(700, hashes)


def test_fallback_depth_cap_treats_deeper_json_as_text():
    shallow = "[" * MAX_FALLBACK_DEPTH + "NaN" + "]" * MAX_FALLBACK_DEPTH
    deep = "[" + shallow + "]"
    assert isinstance(parse_json(shallow), list)
    assert parse_json(deep) == deep
    nested: list = []
    for _ in range(300):  # over orjson's 254-level output limit: the fallback path
        nested = [nested, 2**70]
    assert canonical_json(nested) == canonical_json(nested)
    for _ in range(MAX_FALLBACK_DEPTH):
        nested = [nested]
    with pytest.raises(NestedTooDeepError):
        canonical_json(nested)


@pytest.mark.parametrize("action", [["send"], {"a": 1}, 3, None])
def test_message_results_with_odd_actions_hash_without_crashing(action):
    lg = loop_guard(enabled=True)
    run = Run(lg)
    for tool in ("message", "slack_message"):
        run.call(tool, {"action": action, "text": "hi"})
        run.result(tool, {"action": action, "text": "hi"}, sent_result())
    assert not any(r.pending for r in lg.runs[run.run_id].history.records)


def test_call_without_args_hashes_the_same_in_every_process():
    lg = loop_guard(enabled=True)
    run = Run(lg)
    lg.process(ToolCall(run.envelope(), "noargs", None))
    sig = lg.runs[run.run_id].history.records[-1].sig
    assert sig == f"noargs:{digest(None)}"


# -- memoisation ---------------------------------------------------------------------------


def test_memo_is_bounded_by_characters_and_entries(monkeypatch):
    from streams.core import hashing

    monkeypatch.setattr(hashing, "MEMO_BUDGET_CHARS", 1000)
    monkeypatch.setattr(hashing, "MEMO_ENTRIES", 5)
    memo = hashing._Memo()
    memo.put("a", 1, 600)
    memo.put("b", 2, 300)
    assert (len(memo), memo.chars) == (2, 900)
    memo.put("c", 3, 200)  # would pass the character budget: emptied first
    assert (dict(memo), memo.chars) == ({"c": 3}, 200)
    for key in "defg":
        memo.put(key, 0, 1)
    memo.put("h", 0, 1)  # the sixth entry: emptied first
    assert (dict(memo), memo.chars) == ({"h": 0}, 1)


def test_memoised_hashes_equal_fresh_ones():
    from streams.core import hashing

    args = json.dumps({"command": "make test", "n": [1, 2]})
    result = json.dumps(exec_result("2024-05-01T10:00:00Z ok (pid 12) took 3ms"))
    hashing.clear_memos()
    fresh = (hashing.call_info("exec", args), hashing.result_outcome("exec", None, result, None))
    memoised = (hashing.call_info("exec", args), hashing.result_outcome("exec", None, result, None))
    assert memoised == fresh
    assert hashing._CALL_CACHE.chars == len("exec") + len(args)
    hashing.clear_memos()
    assert (len(hashing._CALL_CACHE), hashing._OUTCOME_CACHE.chars) == (0, 0)
