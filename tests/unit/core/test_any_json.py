"""No event can make the core raise: every tool's result rules take any JSON value in any field.

Arbitrary JSON (and text that is not JSON) is thrown at each tool's rules -- ``exec``,
``process`` poll/log, ``command_status``, message sends, ``update_plan``, errors, unknown
tools -- through ``LoopGuard.process``, as args and as results, both free-form and shaped
like the payloads the rules look into (``details.status``, ``details.tail``, ``content``, ...).
Every run must also be deterministic and survive a persistence round trip.
"""

from __future__ import annotations

import json
from typing import Any

from core_helpers import Run, loop_guard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core.events import ToolCall, ToolResult
from streams.core.run_state import RunState

ANY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**53 - 2, max_value=2**70)
    | st.floats()  # NaN and infinities too: json.dumps writes NaN / Infinity
    | st.text(max_size=12)
    | st.sampled_from(["\ud800", "", " ", "running", "completed", "failed", "pid 12 took 3ms"])
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
# The fields the rules read, each with any value.
FIELDS = [
    *("status", "tail", "aggregated", "exitCode", "exitSignal", "timedOut", "reason", "host"),
    *("command", "warningText", "totalLines", "totalChars", "truncated", "deniedReason"),
    *("messageId", "id", "text", "direction", "senderId", "accountId", "conversation"),
    *("plan", "explanation", "step"),
]
STATUSES = [
    *("running", "completed", "failed", "approval-pending", "approval-unavailable"),
    *("blocked", "sent", ""),
]
details = st.dictionaries(
    st.sampled_from(FIELDS),
    st.one_of(json_values, st.sampled_from(STATUSES)),
    max_size=8,
)
content = st.one_of(
    json_values,
    st.lists(
        st.dictionaries(st.sampled_from(["type", "text", "data"]), json_values, max_size=3)
        | json_values,
        max_size=4,
    ),
)
shaped = st.fixed_dictionaries(
    {}, optional={"details": st.one_of(details, json_values), "content": content}
)
payload_text = st.one_of(
    st.none(),
    json_values.map(json.dumps),
    shaped.map(json.dumps),
    st.text(max_size=20),  # not JSON at all
    st.sampled_from(["null", "NaN", "1e400", "[", '{"a": 1', "-0", "12345678901234567890"]),
)
args_text = st.one_of(
    st.none(),
    json_values.map(json.dumps),
    st.dictionaries(st.sampled_from(["action", "plan", "path"]), json_values).map(json.dumps),
    st.sampled_from(['{"action": "poll"}', '{"action": "log"}', '{"action": "send"}']),
    st.text(max_size=10),
)
TOOLS = [
    *("exec", "process", "command_status", "message", "sessions_send", "conversations_turn"),
    *("conversations_send", "slack_send", "slack_message", "update_plan", "read", "odd tool"),
]
cycles = st.lists(
    st.tuples(
        st.sampled_from(TOOLS),
        args_text,
        payload_text,
        st.one_of(st.none(), st.text(max_size=30), st.sampled_from(["Unknown tool: x"])),
        st.sampled_from([None, "c1", "c2"]),
        st.booleans(),  # the result omits its args
    ),
    min_size=1,
    max_size=8,
)
CONFIG = {
    "enabled": True,
    "historySize": 5,
    "warningThreshold": 2,
    "criticalThreshold": 3,
    "globalCircuitBreakerThreshold": 4,
    "unknownToolThreshold": 2,
}


def run_cycles(cycles_: list[tuple[Any, ...]], repeat: int = 3) -> tuple[list[Any], str]:
    """Each cycle ``repeat`` times (so loops form), with a compaction first; returns the
    decisions and the serialised state, which must load and serialise back the same."""
    lg = loop_guard(**CONFIG)
    run = Run(lg)
    run.compaction("timeout")
    decisions = []
    for _ in range(repeat):
        for tool, args, result, error, call_id, omit in cycles_:
            decisions += lg.process(ToolCall(run.envelope(), tool, args, call_id))
            result_args = None if omit else args
            event = ToolResult(run.envelope(), tool, result_args, result, error, call_id)
            decisions += lg.process(event)
    data = lg.runs[run.run_id].to_dict()
    restored = RunState.from_dict(json.loads(json.dumps(data)))
    assert restored.to_dict() == json.loads(json.dumps(data))
    return decisions, json.dumps(data, sort_keys=True)


@ANY
@given(cycles)
def test_any_payload_through_every_tool_never_raises(cycles_):
    first = run_cycles(cycles_)
    assert run_cycles(cycles_) == first  # and deterministically


@ANY
@given(st.sampled_from(TOOLS), args_text, shaped)
def test_shaped_results_with_any_field_values(tool, args, result):
    run_cycles([(tool, args, json.dumps(result), None, None, False)], repeat=4)


@ANY
@given(details)
def test_exec_details_with_any_values(fields):
    result = json.dumps({"details": fields, "content": [{"type": "text", "text": "x"}]})
    run_cycles([("exec", '{"command": "make"}', result, None, None, False)], repeat=4)


def test_the_reported_exec_result():
    # issue 14: raised TypeError: argument of type 'int' is not iterable (normalize_output)
    result = json.dumps({"details": {"status": "running", "tail": 5}})
    decisions, _ = run_cycles([("exec", '{"command": "make"}', result, None, None, False)], 25)
    assert decisions  # and loops are still found: an identical odd result is no progress
