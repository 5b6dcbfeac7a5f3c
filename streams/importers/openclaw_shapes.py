"""OpenClaw's tool names, argument names and result shapes, which every importer maps to.

loopguard's rules are OpenClaw's, and its outcome hashing (streams/core/outcomes.py) reads
OpenClaw's result shapes, so an imported shell command must look like an OpenClaw ``exec``
call. As OpenClaw's exec tool (src/agents/bash-tools.exec-runtime.ts, bash-tools.exec.ts): a
command that exits, with any code, is a *result* with status ``completed`` and its exit code,
never an error, and a non-zero code is appended to the output as
``(Command exited with code N)``; only a timeout or a kill is ``failed``. The file tools are
pi-coding-agent's as OpenClaw ships them: ``read {path, offset, limit}``, ``write {path,
content}``, ``edit {path, oldText, newText}``.
"""

from __future__ import annotations

from typing import Any

EXEC, READ, WRITE, EDIT = "exec", "read", "write", "edit"


def exec_args(command: str) -> dict[str, Any]:
    return {"command": command}


def exec_result(output: str, exit_code: int | None, timed_out: bool = False) -> dict[str, Any]:
    """An exec result as OpenClaw returns it; ``exit_code`` None where the source does not say.
    Duration, pid and cwd are left out: the source rarely has them and the outcome rules
    ignore them."""
    aggregated = output.strip()
    if exit_code and not timed_out:
        aggregated += f"\n\n(Command exited with code {exit_code})"
    details: dict[str, Any] = {
        "status": "failed" if timed_out else "completed",
        "exitCode": exit_code,
        "aggregated": aggregated,
    }
    if timed_out:
        details["timedOut"] = True
    return {"content": [{"type": "text", "text": aggregated or "(no output)"}], "details": details}


def text_result(text: str) -> dict[str, Any]:
    """Any other tool's result: its text, as OpenClaw's tools return text content."""
    return {"content": [{"type": "text", "text": text}]}


def read_args(path: Any, offset: int | None = None, limit: int | None = None) -> dict[str, Any]:
    """``read``: ``offset`` is the first line (1-based), ``limit`` the number of lines."""
    args: dict[str, Any] = {"path": path}
    if offset is not None:
        args["offset"] = offset
    if limit is not None:
        args["limit"] = limit
    return args


def read_range_args(path: Any, view_range: Any) -> dict[str, Any]:
    """``read`` of an editor's ``view_range`` ``[first, last]`` (last -1: to the end)."""
    if (
        isinstance(view_range, list)
        and len(view_range) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
    ):
        first, last = view_range
        return read_args(path, first, None if last == -1 else max(last - first + 1, 0))
    return read_args(path)


def write_args(path: Any, content: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"path": path}
    if content is not None:
        args["content"] = content
    return args


def edit_args(path: Any, old_text: Any, new_text: Any) -> dict[str, Any]:
    """``edit``; a text the source leaves out is left out (the call then failed anyway)."""
    args: dict[str, Any] = {"path": path}
    if old_text is not None:
        args["oldText"] = old_text
    if new_text is not None:
        args["newText"] = new_text
    return args


def insert_args(path: Any, new_text: Any, line: Any) -> dict[str, Any]:
    """An editor's insert after a line: ``edit`` from nothing to the new text, with the line
    (OpenClaw's edit has no insert; ``insertLine`` keeps two inserts of one text apart)."""
    args = edit_args(path, "", new_text)
    if line is not None:
        args["insertLine"] = line
    return args
