"""OpenHands trajectories: the LLM completion logs of an evaluation run (one JSON per instance,
as in SWE-bench submissions' ``trajs/``), and OpenHands' event stream (a list of action and
observation events, alone or as the ``history`` of an evaluation's output record).

A completion log is one LLM call: its ``fncall_messages`` hold the whole conversation so far,
with structured ``tool_calls`` and ``tool`` messages, and ``fncall_response`` the last answer,
whose call has no result (the run stopped there: ``finish``, or a step limit). The instance id
is the file's stem. Completion logs have no per-message times or per-turn usage: times are
synthetic and no tokens are set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.importers.openhands_events import event_stream_run, output_record_run
from streams.importers.openhands_tools import map_call, map_result, parse_arguments
from streams.importers.runs import ImportedCall, ImportedRun, TrajectoryError
from streams.importers.source_fields import load_json, load_json_lines, text_of

NAME = "openhands"
SUFFIXES = (".json", ".jsonl")


def read_openhands(path: Path) -> list[ImportedRun]:
    """The runs of one file: a completion log, an event stream, or evaluation output records
    (``output.jsonl``: one ``{"instance_id", "history", ...}`` per line)."""
    if path.name.endswith(".jsonl"):
        records = load_json_lines(path)
        if not records:
            raise TrajectoryError("no records")
        return [output_record_run(record, path.stem) for record in records]
    data = load_json(path)
    if isinstance(data, dict) and isinstance(data.get("fncall_messages"), list):
        return [completion_log_run(data, path.stem)]
    if isinstance(data, list):
        return [event_stream_run(data, path.stem)]
    if isinstance(data, dict) and isinstance(data.get("history"), list):
        return [output_record_run(data, path.stem)]
    raise TrajectoryError(
        "not an OpenHands completion log (no fncall_messages) nor an event stream "
        "(a list of events, or an object with a history)"
    )


def completion_log_run(data: dict[str, Any], run_id: str) -> ImportedRun:
    messages = list(data["fncall_messages"])
    final = final_message(data.get("fncall_response"))
    if final is not None:
        messages.append(final)
    requested: list[tuple[str | None, str, dict[str, Any]]] = []
    outputs: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, dict):
            raise TrajectoryError("fncall_messages holds something that is not a message")
        if message.get("role") == "assistant":
            requested.extend(tool_calls(message))
        elif message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
            outputs.setdefault(message["tool_call_id"], text_of(message.get("content")))
    calls = []
    for call_id, name, arguments in requested:
        tool, args = map_call(name, arguments)
        if call_id is None or call_id not in outputs:
            calls.append(ImportedCall(tool, args, call_id, returned=False))
            continue
        result, error = map_result(tool, outputs[call_id])
        calls.append(ImportedCall(tool, args, call_id, result, error))
    return ImportedRun(run_id, tuple(calls))


def final_message(response: Any) -> dict[str, Any] | None:
    """The last completion's answer (``choices[0].message``), if the log has one."""
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        return message if isinstance(message, dict) else None
    return None


def tool_calls(message: dict[str, Any]) -> list[tuple[str | None, str, dict[str, Any]]]:
    """(id, function name, arguments) of an assistant message's tool calls."""
    found = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise TrajectoryError("a tool call without a function name")
        call_id = call.get("id") if isinstance(call.get("id"), str) else None
        found.append((call_id, function["name"], parse_arguments(function.get("arguments"))))
    return found
