"""OpenHands' tools (CodeActAgent's function calls) as OpenClaw's, and their observations as
OpenClaw results; shared by the completion-log and the event-stream readers.

``execute_bash`` is ``exec``; ``str_replace_editor`` (and ``edit_file``'s editor commands) is
``read``/``write``/``edit``; ``think``, ``finish``, ``execute_ipython_cell``, ``browser``, an
``execute_bash`` that types into a running command (``is_input``) and the editor's
``undo_edit`` keep their own name and arguments. In the conversation OpenHands appends lines to
a command's output (``[The command completed with exit code N.]``, ``[Current working
directory: ...]``, ``[Python interpreter: ...]``, ``[Command finished with exit code N]``):
they are taken off, the exit code read from them (OpenClaw's output has no such lines); a
command still running (no exit code line) has exit code null.
"""

from __future__ import annotations

import json
import re
from typing import Any

from streams.importers.openclaw_shapes import (
    EDIT,
    EXEC,
    READ,
    WRITE,
    edit_args,
    exec_args,
    exec_result,
    insert_args,
    read_range_args,
    text_result,
    write_args,
)

SHELL_TOOLS = frozenset({"execute_bash", "bash", "execute_command", "run_command"})
EDITOR_TOOLS = frozenset({"str_replace_editor", "edit_file", "file_editor"})

TRAILER_LINE = re.compile(
    r"\[(?:The command completed with exit code (?P<completed>-?\d+)\."
    r"|Current working directory: [^\n]*"
    r"|Python interpreter: [^\n]*"
    r"|Command finished with exit code (?P<finished>-?\d+))\]"
)
EDITOR_ERROR = "ERROR:"


def map_call(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """OpenHands function call → (OpenClaw tool, args); no equivalent keeps its own."""
    if name in SHELL_TOOLS and isinstance(arguments.get("command"), str):
        if arguments.get("is_input") in (True, "true"):
            return name, arguments  # keys typed into a running command: no OpenClaw exec
        return EXEC, exec_args(arguments["command"])
    if name in EDITOR_TOOLS:
        return map_editor(name, arguments)
    return name, arguments


def map_editor(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    path = arguments.get("path")
    command = arguments.get("command")
    if command == "view":
        return READ, read_range_args(path, arguments.get("view_range"))
    if command == "create":
        return WRITE, write_args(path, arguments.get("file_text"))
    if command == "str_replace":
        # An omitted new_str deletes old_str (the editor's own rule).
        return EDIT, edit_args(path, arguments.get("old_str"), arguments.get("new_str", ""))
    if command == "insert":
        return EDIT, insert_args(path, arguments.get("new_str"), arguments.get("insert_line"))
    return name, arguments


def split_trailer(content: str) -> tuple[str, int | None, bool]:
    """(output, exit code, whether any trailer line was there) of a command's observation text:
    the trailer lines at its end are taken off; an exit code of -1 (OpenHands' "none") is None."""
    lines = content.rstrip().split("\n")
    exit_code: int | None = None
    found = False
    while lines and (match := TRAILER_LINE.fullmatch(lines[-1].strip())):
        found = True
        code = match["finished"] or match["completed"]
        if code is not None and exit_code is None:
            exit_code = int(code)
        lines.pop()
    return "\n".join(lines), (None if exit_code == -1 else exit_code), found


def map_result(tool_name: str, content: str) -> tuple[Any, str | None]:
    """(result, error) of a tool's observation text in the conversation."""
    if tool_name == EXEC:
        output, exit_code, ran = split_trailer(content)
        if not ran and content.startswith(EDITOR_ERROR):  # OpenHands' error, not an output
            return None, error_message(content)
        return exec_result(output, exit_code), None
    if tool_name in (READ, WRITE, EDIT) and content.lstrip().startswith(EDITOR_ERROR):
        return None, error_message(content)
    return text_result(content), None


def error_message(content: str) -> str:
    return content.strip().removeprefix(EDITOR_ERROR).strip() or content.strip()


def command_result(output: str, exit_code: Any) -> dict[str, Any]:
    """A command observation of the event stream: output and metadata's exit code."""
    code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
    return exec_result(output, None if code == -1 else code)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A function call's arguments; text that is no JSON object is kept as it is."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {"arguments": raw}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return {}
