"""OpenClaw session transcripts: tool calls and results kept as OpenClaw wrote them (a
non-zero exec exit stays a result), ``isError`` results as errors, the branch ending at the
last entry, times from the entries and usage on a turn's first call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from importer_helpers import calls, exported, write_json_lines

from streams.importers.openclaw import read_openclaw
from streams.importers.runs import TrajectoryError

MS = 1_760_000_000_000


def entry(entry_id: str, parent: str | None, ms: int, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2025-10-09T08:53:20.000Z",
        "message": {**message, "timestamp": MS + ms},
    }


def assistant(*tool_calls: tuple[str, str, dict[str, Any]], output: int = 12) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}]
        + [{"type": "toolCall", "id": i, "name": n, "arguments": a} for i, n, a in tool_calls],
        "usage": {
            "input": 100,
            "output": output,
            "cacheRead": 900,
            "cacheWrite": 0,
            "totalTokens": 1012,
        },
        "stopReason": "toolUse",
    }


def tool_result(call_id: str, name: str, text: str, details: Any = None, error: bool = False):
    message: dict[str, Any] = {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": name,
        "content": [{"type": "text", "text": text}],
        "isError": error,
    }
    if details is not None:
        message["details"] = details
    return message


EXEC_FAILED = {
    "status": "completed",
    "exitCode": 2,
    "durationMs": 41,
    "aggregated": "no\n\n(Command exited with code 2)",
}
SESSION = [
    {
        "type": "session",
        "version": 3,
        "id": "sess-1",
        "timestamp": "2025-10-09T08:53:20.000Z",
        "cwd": "/w",
    },
    entry("a", None, 0, {"role": "user", "content": "check the build"}),
    entry(
        "b",
        "a",
        1000,
        assistant(("c1", "exec", {"command": "make"}), ("c2", "read", {"path": "/w/Makefile"})),
    ),
    entry(
        "c", "b", 2000, tool_result("c1", "exec", "no\n\n(Command exited with code 2)", EXEC_FAILED)
    ),
    entry("d", "c", 2500, tool_result("c2", "read", "ENOENT: no such file", error=True)),
    # an abandoned branch from "d", then the branch the session went on with
    entry("e", "d", 3000, assistant(("c3", "exec", {"command": "rm -rf /"}))),
    entry("f", "d", 4000, assistant(("c4", "web_search", {"query": "make error 2"}), output=7)),
    entry("g", "f", 5000, tool_result("c4", "web_search", "3 results", {"count": 3})),
]


@pytest.fixture
def session_file(tmp_path: Path) -> Path:
    return write_json_lines(tmp_path / "agents" / "main" / "sessions" / "sess-1.jsonl", SESSION)


def test_calls_and_results_as_written(session_file: Path) -> None:
    [run] = read_openclaw(session_file)
    assert run.run_id == "sess-1"
    assert calls(run) == [
        ("exec", {"command": "make"}),
        ("read", {"path": "/w/Makefile"}),
        ("web_search", {"query": "make error 2"}),
    ]
    assert run.calls[0].result == {
        "content": [{"type": "text", "text": "no\n\n(Command exited with code 2)"}],
        "details": EXEC_FAILED,
    }
    assert run.calls[0].error is None
    assert run.calls[1].error == "ENOENT: no such file"
    assert run.calls[2].result["details"] == {"count": 3}


def test_usage_and_times(session_file: Path) -> None:
    [run] = read_openclaw(session_file)
    usage = [(call.input_tokens, call.output_tokens) for call in run.calls]
    assert usage == [(1000, 12), (None, None), (1000, 7)]
    events = exported(run, "openclaw")
    times = [e["event_time"] - MS for e in events]
    assert times == [0, 1000, 2000, 2000, 2500, 4000, 5000, 5000]
    assert [e["kind"] for e in events][-1] == "run_ended"


def test_a_session_without_ids_is_read_in_file_order(tmp_path: Path) -> None:
    records = [
        {k: v for k, v in record.items() if k not in ("id", "parentId")} for record in SESSION
    ]
    [run] = read_openclaw(write_json_lines(tmp_path / "old.jsonl", records))
    assert [name for name, _ in calls(run)] == ["exec", "read", "exec", "web_search"]


def test_not_a_session(tmp_path: Path) -> None:
    with pytest.raises(TrajectoryError, match="no message entries"):
        read_openclaw(write_json_lines(tmp_path / "x.jsonl", [SESSION[0]]))
