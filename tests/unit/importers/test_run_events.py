"""A run as events: the envelope of the contract (run id, agent = format, gateway ``import``, seq
from 1), RunStarted ... ToolCall/ToolResult pairs ... RunEnded, times from the source or
synthetic, usage on the call, and every line read back by the replay's parser."""

from __future__ import annotations

from importer_helpers import exported

from streams.importers.openclaw_shapes import exec_result
from streams.importers.run_events import event_times, run_tokens
from streams.importers.runs import ImportedCall, ImportedRun

RUN = ImportedRun(
    "django__django-1",
    (
        ImportedCall(
            "exec",
            {"command": "pytest"},
            "c1",
            exec_result("1 failed", 1),
            input_tokens=1200,
            output_tokens=30,
        ),
        ImportedCall("edit", {"path": "/a.py", "oldText": "a", "newText": "b"}, None, error="no"),
        ImportedCall("finish", {"message": "done"}, "c3", returned=False),
    ),
)


def test_the_events_of_a_run() -> None:
    events = exported(RUN, "openhands")
    assert [(e["kind"], e["seq"], e["event_time"]) for e in events] == [
        ("run_started", 1, 0),
        ("tool_call", 2, 1000),
        ("tool_result", 3, 2000),
        ("tool_call", 4, 3000),
        ("tool_result", 5, 4000),
        ("tool_call", 6, 5000),
        ("run_ended", 7, 6000),
    ]
    assert {(e["run_id"], e["agent_id"], e["gateway_id"]) for e in events} == {
        ("django__django-1", "openhands", "import")
    }
    assert events[0]["trigger"] == "user" and events[-1]["status"] == "completed"
    call, result = events[1], events[2]
    assert call["tool_name"] == result["tool_name"] == "exec"
    assert call["args_json"] == result["args_json"] == '{"command": "pytest"}'
    assert call["tool_call_id"] == result["tool_call_id"] == "c1"
    assert (call["input_tokens"], call["output_tokens"]) == (1200, 30)
    assert result["error"] is None and '"exitCode": 1' in result["result_json"]
    # a call without an id in the source gets one by position; an error has no result
    assert events[3]["tool_call_id"] == events[4]["tool_call_id"] == "call-2"
    assert events[4]["error"] == "no" and events[4]["result_json"] is None
    assert "input_tokens" not in events[3]


def test_source_times_are_kept_in_order_and_gaps_take_the_previous_time() -> None:
    assert event_times([None, None, None]) == [0, 1000, 2000]
    assert event_times([None, 5_000, None, 4_000, 9_000]) == [5_000, 5_000, 5_000, 5_000, 9_000]
    timed = ImportedRun(
        "r",
        (
            ImportedCall(
                "exec", {"command": "ls"}, "c", exec_result("", 0), called_at=10, returned_at=12
            ),
        ),
        started_at=7,
        ended_at=20,
    )
    assert [e["event_time"] for e in exported(timed, "x")] == [7, 10, 12, 20]


def test_tokens_sum_what_the_source_reported() -> None:
    assert run_tokens(RUN) == 1230
    assert run_tokens(ImportedRun("r", ())) is None


def test_the_same_run_gives_the_same_events() -> None:
    assert exported(RUN, "openhands") == exported(RUN, "openhands")
