"""Claude Code session transcripts: Bash as ``exec`` (``Exit code N`` errors become results
with the code), Read/Write/Edit/MultiEdit as OpenClaw's file tools, other tools by their own
name, ``is_error`` results as errors, sidechains left out, times and per-turn usage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from importer_helpers import calls, exec_details, exported, result_text, write_json_lines

from streams.importers.claude_code import read_claude_code
from streams.importers.runs import TrajectoryError

SESSION = "7d1c2b9e-0000-4000-8000-000000000001"


def line(kind: str, second: int, content: Any, **fields: Any) -> dict[str, Any]:
    message = {"role": kind, "content": content, **fields.pop("message", {})}
    return {
        "type": kind,
        "sessionId": SESSION,
        "timestamp": f"2025-06-01T12:00:{second:02d}.000Z",
        "message": message,
        **fields,
    }


def tool_use(call_id: str, name: str, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def tool_result(call_id: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}


def turn(message_id: str, output_tokens: int) -> dict[str, Any]:
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 200,
        "cache_read_input_tokens": 3000,
        "output_tokens": output_tokens,
    }
    return {"message": {"id": message_id, "usage": usage}}


TRANSCRIPT = [
    {"type": "summary", "summary": "Fixing tests"},
    line("user", 0, "Make the tests pass"),
    line("assistant", 1, [{"type": "text", "text": "Running the tests."}], **turn("msg_1", 5)),
    line(
        "assistant",
        1,
        [tool_use("tu_1", "Bash", command="npm test", description="tests")],
        **turn("msg_1", 40),
    ),
    line(
        "assistant",
        1,
        [tool_use("tu_2", "Read", file_path="/app/a.ts", offset=10, limit=20)],
        **turn("msg_1", 40),
    ),
    line("user", 3, [tool_result("tu_1", "Exit code 1\n1 failing", is_error=True)]),
    line("user", 4, [tool_result("tu_2", [{"type": "text", "text": "10→export const a = 1"}])]),
    line(
        "assistant",
        5,
        [tool_use("tu_3", "Edit", file_path="/app/a.ts", old_string="1", new_string="2")],
        **turn("msg_2", 9),
    ),
    line(
        "user",
        6,
        [
            tool_result(
                "tu_3",
                "<tool_use_error>String to replace not found in file.</tool_use_error>",
                True,
            )
        ],
    ),
    line(
        "assistant",
        7,
        [
            tool_use(
                "tu_4",
                "MultiEdit",
                file_path="/app/b.ts",
                edits=[
                    {"old_string": "x", "new_string": "y"},
                    {"old_string": "p", "new_string": "q"},
                ],
            ),
            tool_use("tu_5", "Write", file_path="/app/c.ts", content="export {}\n"),
            tool_use("tu_6", "Grep", pattern="TODO", path="/app"),
        ],
    ),
    line("assistant", 7, [tool_use("side_1", "Bash", command="ls")], isSidechain=True),
    line("user", 8, [tool_result("side_1", "a.ts")], isSidechain=True),
    line("user", 8, [tool_result("tu_4", "Applied 2 edits"), tool_result("tu_5", "File created")]),
    line("user", 9, [tool_result("tu_6", "Found 0 files")]),
    line("assistant", 10, [tool_use("tu_7", "Bash", command="npm test")]),
    line("user", 11, [tool_result("tu_7", "> app@1 test\n2 passing")]),
    line("assistant", 12, [tool_use("tu_8", "Bash", command="npm run dev")]),
    line("user", 14, [tool_result("tu_8", "Command timed out after 2m 0.0s", is_error=True)]),
]


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    return write_json_lines(tmp_path / "project" / f"{SESSION}.jsonl", TRANSCRIPT)


def test_tools_become_openclaws(transcript: Path) -> None:
    [run] = read_claude_code(transcript)
    assert run.run_id == SESSION
    assert calls(run) == [
        ("exec", {"command": "npm test"}),
        ("read", {"path": "/app/a.ts", "offset": 10, "limit": 20}),
        ("edit", {"path": "/app/a.ts", "oldText": "1", "newText": "2"}),
        (
            "edit",
            {
                "path": "/app/b.ts",
                "edits": [{"oldText": "x", "newText": "y"}, {"oldText": "p", "newText": "q"}],
            },
        ),
        ("write", {"path": "/app/c.ts", "content": "export {}\n"}),
        ("Grep", {"pattern": "TODO", "path": "/app"}),
        ("exec", {"command": "npm test"}),
        ("exec", {"command": "npm run dev"}),
    ]


def test_results_exit_codes_and_errors(transcript: Path) -> None:
    [run] = read_claude_code(transcript)
    assert exec_details(run, 0) == {
        "status": "completed",
        "exitCode": 1,
        "aggregated": "1 failing\n\n(Command exited with code 1)",
    }
    assert result_text(run, 1) == "10→export const a = 1"
    assert run.calls[2].error == "String to replace not found in file."
    assert exec_details(run, 6) == {
        "status": "completed",
        "exitCode": None,
        "aggregated": "> app@1 test\n2 passing",
    }
    assert exec_details(run, 7)["status"] == "failed" and exec_details(run, 7)["timedOut"]


def test_usage_times_and_events(transcript: Path) -> None:
    [run] = read_claude_code(transcript)
    usage = [(call.input_tokens, call.output_tokens) for call in run.calls]
    assert usage[:3] == [(3210, 40), (None, None), (3210, 9)]
    assert set(usage[3:]) == {(None, None)}
    events = exported(run, "claude-code")
    start = 1_748_779_200_000  # 2025-06-01T12:00:00Z
    assert events[0]["event_time"] == start and events[-1]["event_time"] == start + 14_000
    assert events[1]["tool_call_id"] == "tu_1" and events[1]["input_tokens"] == 3210


def test_not_a_transcript(tmp_path: Path) -> None:
    with pytest.raises(TrajectoryError, match="no user or assistant messages"):
        read_claude_code(write_json_lines(tmp_path / "x.jsonl", [{"type": "summary"}]))
