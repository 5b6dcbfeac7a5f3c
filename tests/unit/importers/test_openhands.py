"""OpenHands completion logs (the SWE-bench ``trajs/*.json`` shape): the conversation's tool
calls as OpenClaw's, exit codes read from the lines OpenHands appends (and taken off the
output), editor errors as errors, the last answer's call without a result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from importer_helpers import calls, exec_details, exported, result_text, write_json

from streams.importers.openhands import read_openhands
from streams.importers.runs import TrajectoryError

TRAILER = (
    "\n[The command completed with exit code {code}.]\n[Current working directory: /work]\n"
    "[Python interpreter: /usr/bin/python]\n[Command finished with exit code {code}]"
)


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def asks(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "Next.", "tool_calls": list(tool_calls)}


def answer(call_id: str, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def completion_log(final_call: dict[str, Any]) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug in /work/calc.py"},
        asks(call("t1", "execute_bash", command="python test_calc.py")),
        answer("t1", "execute_bash", "AssertionError: 3 != 4" + TRAILER.format(code=1)),
        asks(call("t2", "str_replace_editor", command="view", path="/work/calc.py")),
        answer("t2", "str_replace_editor", "Here's the result of running `cat -n`:\n1\tx = 1"),
        asks(
            call(
                "t3",
                "str_replace_editor",
                command="str_replace",
                path="/work/calc.py",
                old_str="x = 2",
                new_str="x = 3",
            )
        ),
        answer("t3", "str_replace_editor", "ERROR:\nNo replacement was performed, old_str `x = 2`"),
        asks(call("t4", "str_replace_editor", command="create", path="/work/t.py", file_text="1")),
        answer("t4", "str_replace_editor", "File created successfully at: /work/t.py"),
        asks(
            call(
                "t5",
                "str_replace_editor",
                command="insert",
                path="/t.py",
                insert_line=2,
                new_str="y",
            ),
        ),
        answer("t5", "str_replace_editor", "The file /t.py has been edited."),
        asks(call("t6", "execute_bash", command="python -m http.server")),
        answer("t6", "execute_bash", "Serving\n[The command has no new output after 30 seconds.]"),
        asks(call("t7", "execute_bash", command="C-c", is_input="true")),
        answer("t7", "execute_bash", "^C" + TRAILER.format(code=130)),
        asks(call("t8", "think", thought="The test expects 4.")),
        answer("t8", "think", "Your thought has been logged."),
        {"role": "user", "content": "Please continue."},
    ]
    return {
        "messages": [],
        "fncall_messages": messages,
        "fncall_response": {"choices": [{"message": asks(final_call)}]},
        "timestamp": 1_700_000_000.0,
    }


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    final = call("t9", "finish", message="Fixed.")
    return write_json(tmp_path / "trajs" / "demo__calc-7.json", completion_log(final))


def test_tool_calls_become_openclaws(log_file: Path) -> None:
    [run] = read_openhands(log_file)
    assert run.run_id == "demo__calc-7" and run.own_outcome is None
    assert calls(run) == [
        ("exec", {"command": "python test_calc.py"}),
        ("read", {"path": "/work/calc.py"}),
        ("edit", {"path": "/work/calc.py", "oldText": "x = 2", "newText": "x = 3"}),
        ("write", {"path": "/work/t.py", "content": "1"}),
        ("edit", {"path": "/t.py", "oldText": "", "newText": "y", "insertLine": 2}),
        ("exec", {"command": "python -m http.server"}),
        ("execute_bash", {"command": "C-c", "is_input": "true"}),
        ("think", {"thought": "The test expects 4."}),
        ("finish", {"message": "Fixed."}),
    ]


def test_results_exit_codes_and_errors(log_file: Path) -> None:
    [run] = read_openhands(log_file)
    assert exec_details(run, 0) == {
        "status": "completed",
        "exitCode": 1,
        "aggregated": "AssertionError: 3 != 4\n\n(Command exited with code 1)",
    }
    assert result_text(run, 1).endswith("1\tx = 1")
    assert run.calls[2].error == "No replacement was performed, old_str `x = 2`"
    assert run.calls[3].error is None and run.calls[4].error is None
    # still running: no exit code line, so no exit code; the notice stays in the output
    assert exec_details(run, 5)["exitCode"] is None
    assert "no new output" in exec_details(run, 5)["aggregated"]
    assert "[Command finished" in result_text(run, 6)  # its own tool: the text as it was
    assert [c.returned for c in run.calls] == [True] * 8 + [False]


def test_events_read_back_with_synthetic_times(log_file: Path) -> None:
    [run] = read_openhands(log_file)
    events = exported(run, "openhands")
    assert len(events) == 2 + 2 * 8 + 1
    assert [e["event_time"] for e in events] == [1000 * n for n in range(len(events))]
    assert events[-2]["kind"] == "tool_call" and events[-2]["tool_name"] == "finish"
    assert events[-1]["kind"] == "run_ended"


def test_a_run_stopped_at_the_step_limit(tmp_path: Path) -> None:
    log = completion_log(call("t9", "execute_bash", command="python test_calc.py"))
    [run] = read_openhands(write_json(tmp_path / "x.json", log))
    assert run.calls[-1].tool_name == "exec" and not run.calls[-1].returned


@pytest.mark.parametrize(
    "data, message",
    [
        ({"messages": []}, "not an OpenHands completion log"),
        ({"fncall_messages": ["hi"]}, "not a message"),
        ({"fncall_messages": [{"role": "assistant", "tool_calls": [{}]}]}, "function name"),
        ([1, 2], "a list of event objects"),
    ],
)
def test_files_that_are_no_openhands_trajectory(tmp_path: Path, data: Any, message: str) -> None:
    with pytest.raises(TrajectoryError, match=message):
        read_openhands(write_json(tmp_path / "bad.json", data))
