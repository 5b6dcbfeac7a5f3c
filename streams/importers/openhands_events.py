"""OpenHands' event stream (``openhands/events/serialization/event.py``): actions and
observations, each observation naming its action by ``cause``.

An agent action is a tool call: by its ``tool_call_metadata`` (function name, and the arguments
the model sent, read from the model response it carries, whose usage goes on the turn's first
call), or, in streams recorded without function calling, by its action type (``run`` is
``execute_bash``, ``read``/``write``/``edit`` the editor, ...). A command's exit code is its
observation's ``metadata.exit_code`` (-1: none). Times are the events' timestamps.
"""

from __future__ import annotations

from typing import Any

from streams.importers.openclaw_shapes import EXEC
from streams.importers.openhands_tools import (
    command_result,
    map_call,
    map_result,
    parse_arguments,
    split_trailer,
)
from streams.importers.runs import (
    RESOLVED,
    UNRESOLVED,
    CallLog,
    ImportedCall,
    ImportedRun,
    TrajectoryError,
)
from streams.importers.source_fields import as_int, epoch_ms

# Agent actions that are tool calls even where the stream has no tool_call_metadata.
TOOL_ACTIONS = frozenset(
    {
        "run",
        "run_ipython",
        "read",
        "write",
        "edit",
        "browse",
        "browse_interactive",
        "think",
        "finish",
        "call_tool_mcp",
        "delegate",
        "task_tracking",
    }
)
# Action fields that are OpenHands' bookkeeping, not the call's arguments.
BOOKKEEPING = frozenset(
    {"thought", "security_risk", "confirmation_state", "impl_source", "hidden", "blocking"}
)


def output_record_run(record: dict[str, Any], fallback_id: str) -> ImportedRun:
    """An evaluation output record: ``instance_id``, ``history``, and, once evaluated, a
    report saying whether the instance was resolved."""
    history = record.get("history")
    if not isinstance(history, list):
        raise TrajectoryError("an output record without a history of events")
    instance = record.get("instance_id")
    run_id = instance if isinstance(instance, str) and instance else fallback_id
    return event_stream_run(history, run_id, record_outcome(record))


def record_outcome(record: dict[str, Any]) -> str | None:
    test_result = record.get("test_result")
    for holder in (record, test_result if isinstance(test_result, dict) else {}):
        report = holder.get("report")
        if isinstance(report, dict) and isinstance(report.get("resolved"), bool):
            return RESOLVED if report["resolved"] else UNRESOLVED
    return None


def event_stream_run(events: list[Any], run_id: str, own_outcome: str | None = None) -> ImportedRun:
    if not events or not all(isinstance(event, dict) for event in events):
        raise TrajectoryError("not an OpenHands event stream (a list of event objects)")
    if not any("action" in event or "observation" in event for event in events):
        raise TrajectoryError("no action or observation events")
    log = CallLog()
    usage_seen: set[str] = set()
    for event in events:
        if "action" in event:
            call = action_call(event, usage_seen)
            if call is not None:
                log.ask(call, event.get("id"))
        elif "observation" in event and event.get("cause") is not None:
            tool = tool_of(log, event["cause"])
            if tool is not None:
                result, error = observation_result(tool, event)
                log.answer(event["cause"], result, error, epoch_ms(event.get("timestamp")))
    times = [epoch_ms(event.get("timestamp")) for event in events]
    known = [time for time in times if time is not None]
    return ImportedRun(
        run_id,
        tuple(log.calls),
        started_at=known[0] if known else None,
        ended_at=known[-1] if known else None,
        own_outcome=own_outcome,
    )


def tool_of(log: CallLog, key: object) -> str | None:
    index = log.pending.get(key)
    return None if index is None else log.calls[index].tool_name


def action_call(event: dict[str, Any], usage_seen: set[str]) -> ImportedCall | None:
    """The tool call an agent action is, or None (messages, system prompts, condensations)."""
    if event.get("source") != "agent":
        return None
    metadata = event.get("tool_call_metadata")
    input_tokens = output_tokens = None
    if isinstance(metadata, dict) and isinstance(metadata.get("function_name"), str):
        call_id = metadata.get("tool_call_id")
        response = metadata.get("model_response")
        arguments = response_arguments(response, call_id)
        if arguments is None:
            arguments = fallback_call(event)[1]
        name = metadata["function_name"]
        input_tokens, output_tokens = turn_usage(response, usage_seen)
    elif event.get("action") in TOOL_ACTIONS:
        call_id = None
        name, arguments = fallback_call(event)
    else:
        return None
    tool, args = map_call(name, arguments)
    return ImportedCall(
        tool,
        args,
        call_id if isinstance(call_id, str) else None,
        called_at=epoch_ms(event.get("timestamp")),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


def response_arguments(response: Any, call_id: Any) -> dict[str, Any] | None:
    """The arguments the model sent for ``call_id``, from the response the action carries."""
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    for call in calls or []:
        if isinstance(call, dict) and call.get("id") == call_id:
            function = call.get("function")
            if isinstance(function, dict):
                return parse_arguments(function.get("arguments"))
    return None


def turn_usage(response: Any, usage_seen: set[str]) -> tuple[int | None, int | None]:
    """The model turn's (input, output) tokens, once per response: the turn's other calls
    carry the same response."""
    if not isinstance(response, dict) or not isinstance(response.get("usage"), dict):
        return None, None
    key = str(response.get("id"))
    if key in usage_seen:
        return None, None
    usage_seen.add(key)
    usage = response["usage"]
    return as_int(usage.get("prompt_tokens")), as_int(usage.get("completion_tokens"))


def fallback_call(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(function name, arguments) from the action itself, as CodeActAgent would have sent it."""
    action = event.get("action")
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    if action == "run":
        call = {"command": args.get("command", "")}
        if args.get("is_input") in (True, "true"):
            call["is_input"] = True
        return "execute_bash", call
    if action == "run_ipython":
        return "execute_ipython_cell", {"code": args.get("code", "")}
    if action == "read":
        view = {"view_range": args["view_range"]} if args.get("view_range") else {}
        return "str_replace_editor", {"command": "view", "path": args.get("path"), **view}
    if action == "write":
        return "str_replace_editor", {
            "command": "create",
            "path": args.get("path"),
            "file_text": args.get("content"),
        }
    if action == "edit" and args.get("command"):
        keys = ("command", "path", "file_text", "old_str", "new_str", "insert_line")
        return "str_replace_editor", {key: args[key] for key in keys if args.get(key) is not None}
    if action == "think":
        return "think", {"thought": args.get("thought", "")}
    return str(action), {key: value for key, value in args.items() if key not in BOOKKEEPING}


def observation_result(tool: str, event: dict[str, Any]) -> tuple[Any, str | None]:
    content = event.get("content") if isinstance(event.get("content"), str) else ""
    if event.get("observation") == "error":
        return None, content.strip() or "error"
    if tool == EXEC and event.get("observation") == "run":
        extras = event.get("extras") if isinstance(event.get("extras"), dict) else {}
        metadata = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else {}
        output, stated, _ = split_trailer(content)
        exit_code = metadata.get("exit_code", extras.get("exit_code"))
        return command_result(output, stated if exit_code is None else exit_code), None
    return map_result(tool, content)
