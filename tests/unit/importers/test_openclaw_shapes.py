"""The OpenClaw shapes importers map to: an exec that exits non-zero is a completed result with
its code (and OpenClaw's ``(Command exited with code N)`` line), an unknown code is null, a
timeout is failed; read ranges from an editor's view range."""

from __future__ import annotations

from streams.core.outcomes import outcome_hash
from streams.importers.openclaw_shapes import (
    exec_result,
    insert_args,
    read_range_args,
    text_result,
)


def test_a_non_zero_exit_is_a_completed_result_with_its_code() -> None:
    result = exec_result("FAILED test_x\n", 1)
    assert result == {
        "content": [{"type": "text", "text": "FAILED test_x\n\n(Command exited with code 1)"}],
        "details": {
            "status": "completed",
            "exitCode": 1,
            "aggregated": "FAILED test_x\n\n(Command exited with code 1)",
        },
    }


def test_exit_zero_unknown_code_empty_output_and_timeout() -> None:
    assert exec_result(" ok \n", 0)["details"] == {
        "status": "completed",
        "exitCode": 0,
        "aggregated": "ok",
    }
    assert exec_result("ok", None)["details"]["exitCode"] is None
    assert exec_result("", 0)["content"][0]["text"] == "(no output)"
    timed_out = exec_result("partial", None, timed_out=True)["details"]
    assert timed_out == {
        "status": "failed",
        "exitCode": None,
        "aggregated": "partial",
        "timedOut": True,
    }


def test_the_exit_code_is_part_of_the_outcome_loopguard_hashes() -> None:
    """What the shapes are for: the core's exec rule reads status, exit code and output."""
    one = outcome_hash("exec", {}, exec_result("same", 1), None).result_hash
    two = outcome_hash("exec", {}, exec_result("same", 2), None).result_hash
    again = outcome_hash("exec", {}, exec_result("same\n", 1), None).result_hash
    assert one != two and one == again


def test_view_ranges_become_offset_and_limit() -> None:
    assert read_range_args("/a.py", [10, 12]) == {"path": "/a.py", "offset": 10, "limit": 3}
    assert read_range_args("/a.py", [5, -1]) == {"path": "/a.py", "offset": 5}
    assert read_range_args("/a.py", None) == {"path": "/a.py"}
    assert read_range_args("/a.py", ["1", 2]) == {"path": "/a.py"}


def test_insert_and_text_results() -> None:
    assert insert_args("/a.py", "x = 1\n", 3) == {
        "path": "/a.py",
        "oldText": "",
        "newText": "x = 1\n",
        "insertLine": 3,
    }
    assert text_result("done") == {"content": [{"type": "text", "text": "done"}]}
