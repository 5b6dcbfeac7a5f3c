"""mini-swe-agent ``.traj.json``: version 1 (a bash block per assistant message, the result's
``<returncode>`` and ``<output>`` in the next user message) and version 2 (actions and
return codes in the messages' ``extra``, tool messages): every call an ``exec`` with its exit
code, timeouts failed, format errors no call, times and usage from the messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from importer_helpers import calls, exec_details, exported, write_json

from streams.importers.mini_swe_agent import read_mini_swe_agent
from streams.importers.runs import TrajectoryError

T0 = 1_750_000_000.0


def said(role: str, content: str, second: float, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": content, "timestamp": T0 + second}
    if extra:
        message["extra"] = extra
    return message


def bash(command: str) -> str:
    return f"THOUGHT: let me look.\n\n```bash\n{command}\n```"


USAGE = {"usage": {"prompt_tokens": 500, "completion_tokens": 20}}
VERSION_1 = {
    "info": {"exit_status": "Submitted", "submission": "diff", "mini_version": "1.9.0"},
    "messages": [
        said("system", "You are a helpful assistant.", 0),
        said("user", "Fix the bug.", 0),
        said("assistant", bash("pytest -q"), 1, response=USAGE),
        said("user", "<returncode>1</returncode>\n<output>\n1 failed\n</output>", 2),
        said("assistant", "I will think first.", 3),  # no block: a format error, no call
        said("user", "Please always provide EXACTLY ONE action in triple backticks.", 4),
        said("assistant", bash("cat big.log"), 5),
        said(
            "user",
            "<returncode>0</returncode>\n<warning>\nThe output of your last command was too "
            "long.\n</warning><output_head>\nstart</output_head>",
            6,
        ),
        said("assistant", bash("sleep 999"), 7),
        said(
            "user",
            "The last command <command>sleep 999</command> timed out and has been killed.\n"
            "The output of the command was:\n <output>\n\n</output>",
            8,
        ),
        said("assistant", bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"), 9),
        said("user", "diff --git a/x b/x", 10),
    ],
    "trajectory_format": "mini-swe-agent-1",
}


def test_version_1(tmp_path: Path) -> None:
    [run] = read_mini_swe_agent(write_json(tmp_path / "demo__x-1.traj.json", VERSION_1))
    assert run.run_id == "demo__x-1" and run.own_outcome is None
    assert calls(run) == [
        ("exec", {"command": "pytest -q"}),
        ("exec", {"command": "cat big.log"}),
        ("exec", {"command": "sleep 999"}),
        ("exec", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"}),
    ]
    assert exec_details(run, 0) == {
        "status": "completed",
        "exitCode": 1,
        "aggregated": "1 failed\n\n(Command exited with code 1)",
    }
    assert exec_details(run, 1)["exitCode"] == 0
    assert exec_details(run, 1)["aggregated"].startswith("<warning>")
    assert exec_details(run, 2) == {
        "status": "failed",
        "exitCode": None,
        "aggregated": "",
        "timedOut": True,
    }
    assert exec_details(run, 3)["exitCode"] is None  # the submission states no code
    assert (run.calls[0].input_tokens, run.calls[0].output_tokens) == (500, 20)
    events = exported(run, "mini-swe-agent")
    start = int(T0 * 1000)
    assert [e["event_time"] - start for e in events] == [
        0,
        1000,
        2000,
        5000,
        6000,
        7000,
        8000,
        9000,
        10000,
        10000,
    ]


VERSION_2 = {
    "info": {"exit_status": "LimitsExceeded", "submission": ""},
    "messages": [
        said("system", "sys", 0),
        said("user", "task", 0),
        {
            "role": "assistant",
            "content": "Two commands.",
            "tool_calls": [{"id": "call_a"}, {"id": "call_b"}],
            "extra": {
                "actions": [
                    {"command": "ls", "tool_call_id": "call_a"},
                    {"command": "make", "tool_call_id": "call_b"},
                ],
                "response": USAGE,
                "timestamp": T0 + 1,
            },
        },
        {
            "role": "tool",
            "tool_call_id": "call_b",
            "content": "<returncode>2</returncode>\n<output>\nmake: *** Error 2\n</output>",
            "extra": {"returncode": 2, "raw_output": "make: *** Error 2\n", "timestamp": T0 + 3},
        },
        {
            "role": "tool",
            "tool_call_id": "call_a",
            "content": "<exception>action was not executed</exception>\n"
            "<returncode>-1</returncode>",
            "extra": {"returncode": -1, "exception_info": "action was not executed"},
        },
        {"role": "exit", "content": "LimitsExceeded", "extra": {"exit_status": "LimitsExceeded"}},
    ],
    "trajectory_format": "mini-swe-agent-1.1",
}


def test_version_2(tmp_path: Path) -> None:
    [run] = read_mini_swe_agent(write_json(tmp_path / "demo__y-2.traj.json", VERSION_2))
    assert calls(run) == [("exec", {"command": "ls"}), ("exec", {"command": "make"})]
    assert [c.call_id for c in run.calls] == ["call_a", "call_b"]
    assert run.calls[0].error == "action was not executed"
    assert exec_details(run, 1)["exitCode"] == 2
    assert exec_details(run, 1)["aggregated"] == "make: *** Error 2\n\n(Command exited with code 2)"
    assert [c.input_tokens for c in run.calls] == [500, None]


@pytest.mark.parametrize("data", [{"info": {}}, {"messages": []}, {"messages": ["hi"]}])
def test_not_a_trajectory(tmp_path: Path, data: Any) -> None:
    with pytest.raises(TrajectoryError, match="not a mini-swe-agent trajectory|not a message"):
        read_mini_swe_agent(write_json(tmp_path / "x.traj.json", data))
