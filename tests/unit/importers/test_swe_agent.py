"""SWE-agent ``.traj`` files: shell actions as ``exec`` (no exit code stated: null),
``str_replace_editor`` and the windowed tools as read/write/edit on the right file, the other
SWE-agent tools under their own names, editor refusals as errors, empty actions skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from importer_helpers import calls, exec_details, exported, write_json

from streams.importers.runs import TrajectoryError
from streams.importers.swe_agent import read_swe_agent


def step(action: str, observation: str, open_file: str = "n/a", as_text: bool = False):
    state: Any = {"open_file": open_file, "working_dir": "/repo"}
    return {
        "action": action,
        "observation": observation,
        "thought": "",
        "state": json.dumps(state) if as_text else state,
        "execution_time": 0.1,
    }


TRAJECTORY = {
    "environment": "docker",
    "trajectory": [
        step("python repro.py", "Traceback: ZeroDivisionError"),
        step("str_replace_editor view /repo/calc.py  --view_range 3 9", "   3 def div(a, b):"),
        step(
            "str_replace_editor str_replace /repo/calc.py   --old_str 'return a/b' "
            "--new_str 'return a / b if b else 0'",
            "The file /repo/calc.py has been edited.",
        ),
        step(
            "str_replace_editor str_replace /repo/calc.py   --old_str 'missing' --new_str x",
            "No replacement was performed, old_str `missing` did not appear verbatim in "
            "/repo/calc.py.",
        ),
        step("str_replace_editor create /repo/t.py --file_text 'print(1)\n'", "File created"),
        step("", "Your output was not formatted correctly."),
        step("open calc.py 20", "[File: /repo/calc.py (30 lines total)]", "/repo/calc.py"),
        step("edit 'a/b' 'a / b'", "Text replaced.", "/repo/calc.py", as_text=True),
        step("edit 4:5\n    return 0\nend_of_edit", "[File: /repo/calc.py]", "/repo/calc.py"),
        step("edit 'zzz' 'y'", "Your edit was not applied (file not modified): ...", "/repo/x"),
        step("find_file calc.py /repo", "Found 1 matches"),
        step("submit", "diff --git a/calc.py b/calc.py"),
    ],
    "info": {"exit_status": "submitted", "model_stats": {"tokens_sent": 1000}},
}


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    return write_json(tmp_path / "demo__calc-3.traj", TRAJECTORY)


def test_actions_become_openclaw_calls(run_file: Path) -> None:
    [run] = read_swe_agent(run_file)
    assert run.run_id == "demo__calc-3" and run.own_outcome is None  # exit_status is no label
    assert calls(run) == [
        ("exec", {"command": "python repro.py"}),
        ("read", {"path": "/repo/calc.py", "offset": 3, "limit": 7}),
        (
            "edit",
            {
                "path": "/repo/calc.py",
                "oldText": "return a/b",
                "newText": "return a / b if b else 0",
            },
        ),
        ("edit", {"path": "/repo/calc.py", "oldText": "missing", "newText": "x"}),
        ("write", {"path": "/repo/t.py", "content": "print(1)\n"}),
        ("read", {"path": "calc.py", "offset": 20}),
        ("edit", {"path": "/repo/calc.py", "oldText": "a/b", "newText": "a / b"}),
        ("edit", {"path": "/repo/calc.py", "range": "4:5", "newText": "    return 0"}),
        ("edit", {"path": "/repo/x", "oldText": "zzz", "newText": "y"}),
        ("find_file", {"args": "calc.py /repo"}),
        ("submit", {}),
    ]


def test_results_and_errors(run_file: Path) -> None:
    [run] = read_swe_agent(run_file)
    assert exec_details(run, 0) == {
        "status": "completed",
        "exitCode": None,  # SWE-agent does not say
        "aggregated": "Traceback: ZeroDivisionError",
    }
    errors = [call.error is not None for call in run.calls]
    assert errors == [False, False, False, True, False, False, False, False, True, False, False]
    assert run.calls[3].error.startswith("No replacement was performed")
    events = exported(run, "swe-agent")
    assert [e["event_time"] for e in events] == [1000 * n for n in range(len(events))]
    assert {e["agent_id"] for e in events} == {"swe-agent"}


@pytest.mark.parametrize(
    "data, message",
    [
        ({"history": []}, "no trajectory list"),
        ({"trajectory": [{"observation": "x"}]}, "step 1 has no action"),
    ],
)
def test_not_a_trajectory(tmp_path: Path, data: Any, message: str) -> None:
    with pytest.raises(TrajectoryError, match=message):
        read_swe_agent(write_json(tmp_path / "x.traj", data))
