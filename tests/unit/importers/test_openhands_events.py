"""OpenHands' event stream: actions with their tool_call_metadata (arguments from the model
response, usage once per response), observations matched by ``cause``, exit codes from the
metadata, error observations, times from the events; streams without function calling; the
evaluation's output records with their resolved label."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from importer_helpers import calls, exec_details, exported, write_json, write_json_lines

from streams.importers.openhands import read_openhands
from streams.importers.runs import TrajectoryError


def response(response_id: str, *tool_calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": response_id,
        "choices": [
            {
                "message": {
                    "tool_calls": [
                        {"id": i, "function": {"name": name, "arguments": json.dumps(args)}}
                        for i, name, args in tool_calls
                    ]
                }
            }
        ],
        "usage": {"prompt_tokens": 900, "completion_tokens": 40},
    }


TWO_CALLS = response(
    "resp-1",
    ("tc1", "execute_bash", {"command": "pytest -x"}),
    ("tc2", "str_replace_editor", {"command": "view", "path": "/w/a.py", "view_range": [1, 5]}),
)


def action(event_id: int, kind: str, second: int, call_id: str, **args: Any) -> dict[str, Any]:
    return {
        "id": event_id,
        "timestamp": f"2025-03-01T10:00:{second:02d}.500000",
        "source": "agent",
        "action": kind,
        "args": {**args, "thought": "", "security_risk": None},
        "tool_call_metadata": {
            "function_name": {"run": "execute_bash", "read": "str_replace_editor"}[kind],
            "tool_call_id": call_id,
            "model_response": TWO_CALLS,
            "total_calls_in_response": 2,
        },
    }


def observation(event_id: int, kind: str, second: int, cause: int, content: str, **extras: Any):
    return {
        "id": event_id,
        "timestamp": f"2025-03-01T10:00:{second:02d}",
        "source": "environment",
        "observation": kind,
        "cause": cause,
        "content": content,
        "extras": extras,
    }


EVENTS = [
    {"id": 0, "timestamp": "2025-03-01T10:00:00", "source": "user", "action": "message"},
    action(1, "run", 1, "tc1", command="pytest -x"),
    action(2, "read", 2, "tc2", path="/w/a.py"),
    observation(3, "run", 3, 1, "1 failed", metadata={"exit_code": 2, "working_dir": "/w"}),
    observation(4, "error", 4, 2, "File not found: /w/a.py"),
    {"id": 5, "timestamp": "2025-03-01T10:00:05", "source": "agent", "action": "message"},
    {"id": 6, "timestamp": "2025-03-01T10:00:09", "source": "agent", "action": "run", "args": {}},
]


def test_an_event_stream(tmp_path: Path) -> None:
    events = [*EVENTS[:-1], {**EVENTS[-1], "args": {"command": "ls", "is_input": False}}]
    [run] = read_openhands(write_json(tmp_path / "session-42.json", events))
    assert run.run_id == "session-42"
    assert calls(run) == [
        ("exec", {"command": "pytest -x"}),
        ("read", {"path": "/w/a.py", "offset": 1, "limit": 5}),  # the model's arguments
        ("exec", {"command": "ls"}),  # no tool_call_metadata: from the action itself
    ]
    assert exec_details(run, 0) == {
        "status": "completed",
        "exitCode": 2,
        "aggregated": "1 failed\n\n(Command exited with code 2)",
    }
    assert run.calls[1].error == "File not found: /w/a.py"
    assert not run.calls[2].returned
    usage = [(c.input_tokens, c.output_tokens) for c in run.calls]
    assert usage == [(900, 40), (None, None), (None, None)]  # once per model response
    times = [e["event_time"] for e in exported(run, "openhands")]
    # each call is followed by its result; a time never goes back (call 2 was asked at 2.5 s)
    start = 1_740_823_200_000  # 2025-03-01T10:00:00Z
    assert [time - start for time in times] == [0, 1500, 3000, 3000, 4000, 9000, 9000]


def test_output_records_carry_the_instance_and_its_label(tmp_path: Path) -> None:
    records = [
        {"instance_id": "demo__x-1", "history": EVENTS, "report": {"resolved": True}},
        {"instance_id": "demo__x-2", "history": EVENTS, "test_result": {"report": {}}},
        {
            "instance_id": "demo__x-3",
            "history": EVENTS,
            "test_result": {"report": {"resolved": False}},
        },
    ]
    runs = read_openhands(write_json_lines(tmp_path / "output.jsonl", records))
    assert [(r.run_id, r.own_outcome) for r in runs] == [
        ("demo__x-1", "resolved"),
        ("demo__x-2", None),
        ("demo__x-3", "unresolved"),
    ]
    [one] = read_openhands(write_json(tmp_path / "one.json", records[0]))
    assert one.run_id == "demo__x-1" and len(one.calls) == 3


@pytest.mark.parametrize(
    "data, message",
    [([], "a list of event objects"), ([{"id": 1}], "no action or observation events")],
)
def test_not_an_event_stream(tmp_path: Path, data: Any, message: str) -> None:
    with pytest.raises(TrajectoryError, match=message):
        read_openhands(write_json(tmp_path / "bad.json", data))
    bad_lines = tmp_path / "bad.jsonl"
    bad_lines.write_text('{"instance_id": "a", "history": []}\n{oops\n')
    with pytest.raises(TrajectoryError, match="line 2: not valid JSON"):
        read_openhands(bad_lines)
