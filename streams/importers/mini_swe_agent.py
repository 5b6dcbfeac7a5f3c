"""mini-swe-agent ``.traj.json`` files (``agents/default.py``: ``info``, ``messages``,
``trajectory_format``): every action is a shell command, so every call is OpenClaw's ``exec``.

Version 1 wrote one command per assistant message in a ```` ```bash ```` block and the result
as the next user message, ``<returncode>N</returncode>`` and the ``<output>`` (or, for a long
output, its head and tail with a warning); version 2 keeps the parsed ``actions`` (and tool
call ids) and each result's ``returncode`` and ``raw_output`` in the messages' ``extra``. A
result without a stated code (a timeout message, the final submission) has exit code null; a
command that timed out is ``failed`` with ``timedOut``; one the environment could not run
(version 2's ``exception_info``) is an error. Times are the messages' timestamps,
usage the response's ``usage`` on the turn's first call. ``info.exit_status`` (Submitted,
LimitsExceeded, ...) is how the run ended, not whether the task was resolved: no label.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from streams.importers.openclaw_shapes import EXEC, exec_args, exec_result
from streams.importers.runs import CallLog, ImportedCall, ImportedRun, TrajectoryError
from streams.importers.source_fields import as_int, epoch_ms, load_json, text_of

NAME = "mini-swe-agent"
SUFFIX = ".traj.json"
ACTION_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)
RETURN_CODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
OUTPUT = re.compile(r"<output>\n?(.*?)</output>", re.DOTALL)
TIMED_OUT = ("timed out and has been killed", "TimeoutExpired", "timed out after")


def read_mini_swe_agent(path: Path) -> list[ImportedRun]:
    data = load_json(path)
    messages = data.get("messages") if isinstance(data, dict) else data  # or the bare list
    if not isinstance(messages, list) or not messages:
        raise TrajectoryError("not a mini-swe-agent trajectory (no messages list)")
    log = CallLog()
    times: list[int] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise TrajectoryError("messages holds something that is not a message")
        extra = message.get("extra") if isinstance(message.get("extra"), dict) else {}
        at = epoch_ms(message.get("timestamp", extra.get("timestamp")))
        if at is not None:
            times.append(at)
        if message["role"] == "assistant":
            ask(log, message, extra, at)
        elif message["role"] in ("user", "tool") and log.pending:
            answer(log, message, extra, at)
    run_id = path.name.removesuffix(SUFFIX).removesuffix(".json")
    return [
        ImportedRun(
            run_id,
            tuple(log.calls),
            started_at=times[0] if times else None,
            ended_at=times[-1] if times else None,
        )
    ]


def commands(message: dict[str, Any], extra: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(command, tool call id) of the actions an assistant message asked for."""
    actions = extra.get("actions")
    if isinstance(actions, list):
        return [
            (action["command"], action.get("tool_call_id"))
            for action in actions
            if isinstance(action, dict) and isinstance(action.get("command"), str)
        ]
    found = ACTION_BLOCK.findall(text_of(message.get("content")))
    # Version 1 runs exactly one block; with none or several it asked again (a format error).
    return [(found[0].strip(), None)] if len(found) == 1 else []


def ask(log: CallLog, message: dict[str, Any], extra: dict[str, Any], at: int | None) -> None:
    input_tokens, output_tokens = turn_usage(extra)
    for number, (command, call_id) in enumerate(commands(message, extra)):
        first = number == 0
        call = ImportedCall(
            EXEC,
            exec_args(command),
            call_id if isinstance(call_id, str) else None,
            called_at=at,
            input_tokens=input_tokens if first else None,
            output_tokens=output_tokens if first else None,
        )
        log.ask(call, call.call_id or ("position", len(log.calls)))


def turn_usage(extra: dict[str, Any]) -> tuple[int | None, int | None]:
    response = extra.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None, None
    return as_int(usage.get("prompt_tokens")), as_int(usage.get("completion_tokens"))


def answer(log: CallLog, message: dict[str, Any], extra: dict[str, Any], at: int | None) -> None:
    """A result: for the call its tool call id names, else for the oldest waiting call."""
    key = message.get("tool_call_id")
    if key not in log.pending:
        key = log.waiting()[0]
    content = text_of(message.get("content"))
    exit_code = as_int(extra.get("returncode"))
    if exit_code is None and (match := RETURN_CODE.search(content)):
        exit_code = int(match[1])
    output = extra.get("raw_output")
    if not isinstance(output, str):
        output = observation_output(content)
    exception = str(extra.get("exception_info") or "")
    timed_out = any(marker in content or marker in exception for marker in TIMED_OUT)
    if exception and not timed_out:  # not run, or the environment failed: no exit to report
        log.answer(key, error=exception, at=at)
        return
    log.answer(key, exec_result(output, None if timed_out else exit_code, timed_out), at=at)


def observation_output(content: str) -> str:
    """The command's output in the observation text: the ``<output>`` block, else the text
    after the return code (a long output's warning, head and tail), else the whole text."""
    if match := OUTPUT.search(content):
        return match[1]
    if match := RETURN_CODE.search(content):
        return content[match.end() :].strip()
    return content
