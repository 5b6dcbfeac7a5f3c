"""Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``): one JSON
object per line; ``assistant`` lines carry ``tool_use`` blocks, ``user`` lines the
``tool_result`` blocks that answer them (``tool_use_id``, ``is_error``).

Bash is ``exec``: Claude Code reports a non-zero exit as an error whose text starts with
``Exit code N``, which becomes a completed result with that exit code, as OpenClaw's exec
returns it; a successful command states no code (null). Read, Write, Edit and MultiEdit are
``read``, ``write`` and ``edit``; Grep, Glob, LS, Task, TodoWrite, WebFetch, ... keep their
names and input (OpenClaw has no such tools). Another tool's ``is_error`` result is the call's
error, without the ``<tool_use_error>`` wrapper. Subagent (sidechain) lines are left out when
the file has the main conversation. Times are the lines' timestamps; a model turn's usage
(input with cache reads and writes, and output) goes on its first call. The run id is the
file's stem (the session id).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from streams.importers.openclaw_shapes import (
    EDIT,
    EXEC,
    READ,
    WRITE,
    edit_args,
    exec_args,
    exec_result,
    read_args,
    text_result,
    write_args,
)
from streams.importers.runs import CallLog, ImportedCall, ImportedRun, TrajectoryError
from streams.importers.source_fields import (
    as_int,
    epoch_ms,
    load_json_lines,
    text_of,
    transcript_run,
)

NAME = "claude-code"
SUFFIX = ".jsonl"
EXIT_CODE = re.compile(r"Exit code (-?\d+)\n?")
TOOL_USE_ERROR = re.compile(r"<tool_use_error>(.*)</tool_use_error>", re.DOTALL)
INPUT_USAGE = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def read_claude_code(path: Path) -> list[ImportedRun]:
    records = load_json_lines(path)
    lines = [
        record
        for record in records
        if record.get("type") in ("user", "assistant") and isinstance(record.get("message"), dict)
    ]
    if not lines:
        raise TrajectoryError("not a Claude Code transcript (no user or assistant messages)")
    lines = [line for line in lines if not line.get("isSidechain")] or lines
    usage = last_usage(lines)
    log = CallLog()
    for line in lines:
        at = epoch_ms(line.get("timestamp"))
        message = line["message"]
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
        if line["type"] == "assistant":
            if any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks):
                ask(log, blocks, usage.pop(message.get("id"), (None, None)), at)
        else:
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    answer(log, block, at)
    return [transcript_run(path.stem, log, records)]


def last_usage(lines: list[dict[str, Any]]) -> dict[Any, tuple[int | None, int | None]]:
    """Usage per model message id: Claude Code writes a message's blocks on separate lines,
    each with the usage so far; the last one is the turn's."""
    usage: dict[Any, tuple[int | None, int | None]] = {}
    for line in lines:
        message = line["message"]
        counts = message.get("usage")
        if line["type"] == "assistant" and isinstance(counts, dict):
            inputs = [as_int(counts.get(key)) for key in INPUT_USAGE]
            known = [count for count in inputs if count is not None]
            usage[message.get("id")] = (
                sum(known) if known else None,
                as_int(counts.get("output_tokens")),
            )
    return usage


def ask(
    log: CallLog, blocks: list[Any], usage: tuple[int | None, int | None], at: int | None
) -> None:
    for block in blocks:
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            continue
        tool_input = block.get("input") if isinstance(block.get("input"), dict) else {}
        tool, args = map_tool(str(block.get("name")), tool_input)
        call_id = block.get("id") if isinstance(block.get("id"), str) else None
        log.ask(ImportedCall(tool, args, call_id, called_at=at, **turn_tokens(usage)), call_id)
        usage = (None, None)  # the turn's first call only


def turn_tokens(usage: tuple[int | None, int | None]) -> dict[str, int | None]:
    return {"input_tokens": usage[0], "output_tokens": usage[1]}


def map_tool(name: str, tool_input: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    path = tool_input.get("file_path")
    if name == "Bash" and isinstance(tool_input.get("command"), str):
        return EXEC, exec_args(tool_input["command"])
    if name == "Read":
        return READ, read_args(
            path, as_int(tool_input.get("offset")), as_int(tool_input.get("limit"))
        )
    if name == "Write":
        return WRITE, write_args(path, tool_input.get("content"))
    if name == "Edit":
        args = edit_args(path, tool_input.get("old_string"), tool_input.get("new_string"))
        if tool_input.get("replace_all") is True:
            args["replaceAll"] = True
        return EDIT, args
    if name == "MultiEdit" and isinstance(tool_input.get("edits"), list):
        edits = [
            edit_args(path, edit.get("old_string"), edit.get("new_string"))
            for edit in tool_input["edits"]
            if isinstance(edit, dict)
        ]
        if len(edits) == 1:
            return EDIT, edits[0]
        return EDIT, {
            "path": path,
            "edits": [{k: v for k, v in e.items() if k != "path"} for e in edits],
        }
    return name, tool_input


def answer(log: CallLog, block: dict[str, Any], at: int | None) -> None:
    key = block.get("tool_use_id")
    index = log.pending.get(key)
    if index is None:
        return
    text = text_of(block.get("content"))
    failed = block.get("is_error") is True
    if log.calls[index].tool_name == EXEC:
        if not failed:
            log.answer(key, exec_result(text, None), at=at)
        elif match := EXIT_CODE.match(text):
            log.answer(key, exec_result(text[match.end() :], int(match[1])), at=at)
        elif "timed out" in text.lower():
            log.answer(key, exec_result(text, None, timed_out=True), at=at)
        else:
            log.answer(key, error=text.strip() or "error", at=at)
        return
    if failed:
        wrapped = TOOL_USE_ERROR.fullmatch(text.strip())
        log.answer(key, error=(wrapped[1] if wrapped else text).strip() or "error", at=at)
    else:
        log.answer(key, text_result(text), at=at)
