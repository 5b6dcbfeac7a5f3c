"""SWE-agent ``.traj`` files (``sweagent/types.py``): a ``trajectory`` list of steps, each with
the ``action`` string the agent ran, its ``observation`` and the environment ``state``
(``open_file`` among others), and ``info`` (``exit_status``, totals).

An action is a shell command (``exec``) unless its first word is one of SWE-agent's tools:
``str_replace_editor`` view/create/str_replace/insert are ``read``/``write``/``edit``; the
windowed tools' ``open``, ``create``, ``edit`` and ``insert`` are ``read``, ``write`` and
``edit`` on the open file; the others (``submit``, ``goto``, ``scroll_down``, ``find_file``,
``search_dir``, ...) keep their name, with the rest of the action as ``args``. SWE-agent states
no exit codes and no times: exit codes are null and times synthetic. An editor message that
says the edit was not made is the call's error. ``exit_status`` says how the run ended, not
whether the task was resolved: no label comes from it.
"""

from __future__ import annotations

import json
import re
import shlex
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
    insert_args,
    read_args,
    read_range_args,
    text_result,
    write_args,
)
from streams.importers.runs import ImportedCall, ImportedRun, TrajectoryError
from streams.importers.source_fields import as_int, load_json

NAME = "swe-agent"
SUFFIX = ".traj"
EDITOR = "str_replace_editor"
# SWE-agent's tool bundles (tools/*/config.yaml) that keep their own name.
OWN_TOOLS = frozenset(
    {
        "submit",
        "goto",
        "scroll_up",
        "scroll_down",
        "find_file",
        "search_dir",
        "search_file",
        "filemap",
        "exit_forfeit",
        "view_image",
    }
)
WINDOWED = frozenset({"open", "create", "edit", "insert"})
RANGE_EDIT = re.compile(r"edit\s+(\d+):(\d+)\s*\n(.*?)\n?end_of_edit\s*", re.DOTALL)
# What SWE-agent's editors print when they did not do what was asked.
EDITOR_ERRORS = re.compile(
    r"^(?:ERROR:|No replacement was performed|Your edit was not applied"
    r"|Your proposed edit has introduced new syntax error|Your search and replace strings are "
    r"the same|No file opened|The path \S+ does not exist|The path \S+ is not an absolute path"
    r"|The path \S+ is a directory|File already exists at|The parent directory \S+ does not "
    r"exist|Invalid `(?:view_range|insert_line|path)`|Parameter `\w+` is required"
    r"|Unrecognized command|No edit history found|Ran into .* while trying to)"
)


def read_swe_agent(path: Path) -> list[ImportedRun]:
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("trajectory"), list):
        raise TrajectoryError("not a SWE-agent trajectory (no trajectory list)")
    calls = []
    for number, step in enumerate(data["trajectory"], start=1):
        if not isinstance(step, dict) or not isinstance(step.get("action"), str):
            raise TrajectoryError(f"step {number} has no action")
        action = step["action"].strip()
        if not action:  # a format error or an autosubmission: no tool ran
            continue
        tool, args = map_action(action, open_file(step.get("state")))
        result, error = map_observation(tool, str(step.get("observation") or ""))
        calls.append(ImportedCall(tool, args, result=result, error=error))
    return [ImportedRun(path.name.removesuffix(SUFFIX), tuple(calls))]


def open_file(state: Any) -> str | None:
    """The file the windowed tools work on (``state`` is JSON text in older trajectories)."""
    if isinstance(state, str):
        try:
            state = json.loads(state)
        except json.JSONDecodeError:
            return None
    value = state.get("open_file") if isinstance(state, dict) else None
    return value if isinstance(value, str) and value not in ("", "n/a") else None


def map_action(action: str, current_file: str | None) -> tuple[str, dict[str, Any]]:
    name, _, rest = action.partition(" ")
    name = name.split("\n", 1)[0]
    if name == EDITOR:
        return map_editor(action)
    if name in WINDOWED:
        mapped = map_windowed(name, action, current_file)
        if mapped is not None:
            return mapped
    if name in OWN_TOOLS or name in WINDOWED:
        rest = action[len(name) :].strip()
        return name, {"args": rest} if rest else {}
    return EXEC, exec_args(action)


def words(action: str) -> list[str] | None:
    try:
        return shlex.split(action)
    except ValueError:  # unbalanced quotes
        return None


def map_editor(action: str) -> tuple[str, dict[str, Any]]:
    tokens = words(action)
    if tokens is None or len(tokens) < 3:
        return EDITOR, {"command": action}
    command, path = tokens[1], tokens[2]
    flags = editor_flags(tokens[3:])
    if command == "view":
        view = flags.get("view_range")
        return READ, read_range_args(path, [as_int(n) for n in view] if view else None)
    if command == "create":
        return WRITE, write_args(path, flags.get("file_text"))
    if command == "str_replace":
        return EDIT, edit_args(path, flags.get("old_str"), flags.get("new_str", ""))
    if command == "insert":
        return EDIT, insert_args(path, flags.get("new_str"), as_int(flags.get("insert_line")))
    return EDITOR, {"command": command, "path": path, **flags}


def editor_flags(tokens: list[str]) -> dict[str, Any]:
    """``--name value`` pairs (``--view_range`` takes two values)."""
    flags: dict[str, Any] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if not token.startswith("--"):
            index += 1
            continue
        name = token[2:]
        width = 2 if name == "view_range" else 1
        values = tokens[index + 1 : index + 1 + width]
        flags[name] = values if width == 2 else (values[0] if values else "")
        index += 1 + width
    return flags


def map_windowed(
    name: str, action: str, current_file: str | None
) -> tuple[str, dict[str, Any]] | None:
    """The windowed tools that open, create or change a file; None: keep their own name."""
    if name == "edit" and (match := RANGE_EDIT.fullmatch(action)):
        return EDIT, {"path": current_file, "range": f"{match[1]}:{match[2]}", "newText": match[3]}
    tokens = words(action)
    if tokens is None or len(tokens) < 2:
        return None
    if name == "open":
        return READ, read_args(tokens[1], as_int(tokens[2]) if len(tokens) > 2 else None)
    if name == "create":
        return WRITE, write_args(tokens[1], "")
    if name == "edit" and len(tokens) >= 3:
        return EDIT, edit_args(current_file, tokens[1], tokens[2])
    if name == "insert":
        return EDIT, insert_args(
            current_file, tokens[1], as_int(tokens[2]) if len(tokens) > 2 else None
        )
    return None


def map_observation(tool: str, observation: str) -> tuple[Any, str | None]:
    if tool == EXEC:
        return exec_result(observation, None), None
    if tool in (READ, WRITE, EDIT) and EDITOR_ERRORS.match(observation.lstrip()):
        return None, observation.strip()
    return text_result(observation), None
