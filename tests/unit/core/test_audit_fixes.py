"""The core audit of issue 17: each finding as the failing case it was, plus a property each.

- a ToolResult with neither args nor call id matched nothing, was recorded as a call of its
  own and alternated with the real calls: false ping-pong warnings that never blocked;
- bare results (an object with neither ``details`` nor ``content``, an exec output string)
  hashed as if empty or byte for byte: a ``telegram_send`` answering ``{"ok": true,
  "messageId": "m3"}`` and an exec answering ``"ok\\n"`` / ``"ok"`` looked like progress (or a
  bare ``{"ok": false}`` like the same result as ``{"ok": true}``).

(The post-compaction guard's exact comparison and the historySize warning are in
test_guard.py and test_config.py; the counting convention in test_detectors.py.)
"""

from __future__ import annotations

import json

from core_helpers import Run, loop_guard, summary, text_result
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.hashing import result_outcome

SMALL = {"warningThreshold": 5, "criticalThreshold": 10, "globalCircuitBreakerThreshold": 15}


def on(**block):
    return loop_guard(enabled=True, **block)


# -- results with neither args nor call id -----------------------------------------------


def test_an_anonymous_result_answers_its_tools_open_call():
    run = Run(on(**SMALL))
    for _ in range(25):
        run.call("read", {"path": "a"})
        run.result("read", None, text_result("x"), omit_args=True)  # no args, no call id
    got = summary(run.decisions)
    assert not any(detector == "ping_pong" for _, detector, _ in got)
    assert got[:2] == [("warn", "generic_repeat", 5), ("warn", "generic_repeat", 6)]
    assert ("block", "generic_repeat", 10) in got  # the identical results do block
    history = run.lg.runs[run.run_id].history
    assert {r.sig for r in history.records} == {history.records[-1].sig}  # one signature


def test_an_anonymous_result_answers_the_newest_open_call_of_its_tool():
    run = Run(on(**SMALL))
    run.call("read", {"path": "a"})
    run.call("list", {"dir": "/"})
    run.call("read", {"path": "b"})
    run.result("read", None, text_result("B"), omit_args=True)
    run.result("read", None, text_result("A"), omit_args=True)
    records = run.lg.runs[run.run_id].history.records
    assert [(r.tool_name, r.pending) for r in records] == [
        ("read", False),
        ("list", True),
        ("read", False),
    ]
    assert records[0].result_hash != records[2].result_hash


def test_an_anonymous_result_without_an_open_call_is_no_outcome_but_a_failure_counts():
    run = Run(on(consecutiveErrors={"warningThreshold": 2, "criticalThreshold": 9}))
    for _ in range(2):
        run.result("fetch", None, error="ECONNRESET", omit_args=True)  # no call at all
    state = run.lg.runs[run.run_id]
    assert len(state.history) == 0 and state.error_streak == 2
    assert summary(run.call("fetch", {"url": "u"})) == [("warn", "consecutive_errors", 2)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.booleans()), min_size=1, max_size=40))
def test_anonymous_results_never_add_calls(calls):
    """Whatever the mix of anonymous and full results, the window holds the calls made."""
    run = Run(loop_guard())  # detectors off: nothing stops the run, the history is kept
    for path, anonymous in calls:
        run.call("read", {"path": path})
        if anonymous:
            run.result("read", None, text_result(path), omit_args=True)
        else:
            run.result("read", {"path": path}, text_result(path))
    history = run.lg.runs[run.run_id].history
    assert len(history) == min(len(calls), 30)
    assert not any(r.pending for r in history.records)


# -- bare results --------------------------------------------------------------------------


def outcome(tool: str, result, action=None) -> str | None:
    return result_outcome(tool, action, json.dumps(result), None).result_hash


def test_a_bare_send_result_drops_its_id_and_keeps_what_it_says():
    assert outcome("telegram_send", {"ok": True, "messageId": "m3"}) == outcome(
        "telegram_send", {"ok": True, "messageId": "m4"}
    )
    assert outcome("telegram_send", {"ok": True, "messageId": "m3"}) != outcome(
        "telegram_send", {"ok": False, "error": "chat not found"}
    )


def test_a_send_loop_with_fresh_ids_is_no_progress():
    run = Run(on(**SMALL))
    for i in range(13):
        run.cycle("telegram_send", {"chat": "c", "text": "hi"}, {"ok": True, "messageId": f"m{i}"})
    assert [d.action.value for d in run.decisions][-3:] == ["block", "block", "abort"]


def test_bare_objects_of_other_tools_compare_what_they_say():
    assert outcome("read_file", {"text": "code 1"}) != outcome("read_file", {"text": "code 2"})
    assert outcome("read_file", {"text": "code 1"}) == outcome("read_file", {"text": "code 1"})
    run = Run(on(**SMALL))
    for i in range(30):
        run.cycle("read_file", {"path": "log"}, {"text": f"line {i}"})
    assert {d.action.value for d in run.decisions} == {"warn"}  # changing: never blocked


def test_a_result_with_details_or_content_keeps_the_reference_rule():
    # not bare: a non-object details is ignored as the reference does
    assert outcome("read", {"details": "x", "other": 1}) == outcome("read", {"details": 5})
    assert outcome("read", {"content": [], "extra": 1}) == outcome("read", {"content": []})


def test_a_bare_veto_shape_is_not_the_loop_veto():
    bare = {"status": "blocked", "deniedReason": "tool-loop"}
    assert not result_outcome("read", None, json.dumps(bare), None).loop_veto
    assert result_outcome("read", None, json.dumps({"details": bare}), None).loop_veto


def test_a_bare_exec_output_is_trimmed_like_aggregated():
    assert outcome("exec", "ok\n") == outcome("exec", "ok") == outcome("exec", " ok ")
    assert outcome("exec", "ok") != outcome("exec", "fail")
    run = Run(on(**SMALL))
    for i in range(13):
        run.cycle("exec", {"command": "true"}, "ok\n" if i % 2 else "ok")
    assert [d.action.value for d in run.decisions][-3:] == ["block", "block", "abort"]


def test_a_bare_exec_output_masks_the_clock_for_detectors_not_for_the_guard():
    first = result_outcome("exec", None, json.dumps("12:00:01 failed"), None)
    second = result_outcome("exec", None, json.dumps("12:00:02 failed"), None)
    assert first.result_hash == second.result_hash
    assert first.exact_hash != second.exact_hash and first.exact_hash is not None


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["ok", "text", "n", "status", "messageId", "ts", "id"]),
        st.one_of(st.booleans(), st.integers(-3, 3), st.text(max_size=4)),
        max_size=5,
    )
)
def test_a_bare_object_hashes_as_its_details(bare):
    """The rule in one line: ``X`` is ``{"details": X}`` for every tool kind."""
    kinds = (("read", None), ("telegram_send", None), ("message", "send"), ("exec", None))
    for tool, action in kinds + (("process", "poll"), ("update_plan", None)):
        wrapped = {"details": bare}
        if bare.get("status") == "blocked":
            continue
        assert outcome(tool, bare, action) == outcome(tool, wrapped, action)
