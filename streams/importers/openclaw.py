"""OpenClaw session transcripts (pi-coding-agent's session files, one JSON object per line): a
``session`` header, then entries; ``message`` entries hold the agent's messages: an
``assistant`` message's ``toolCall`` blocks (``id``, ``name``, ``arguments``) and the
``toolResult`` messages that answer them (``toolCallId``, ``content``, ``details``,
``isError``).

The tools are OpenClaw's already: names, arguments and results are kept as they are (a result
is its ``content`` and ``details``; an ``isError`` result is the call's error, its text).
Entries form a tree (``id``/``parentId``): the branch that ends at the last entry is the
session's conversation. Times are the entries' timestamps; an assistant message's ``usage``
(input with cache reads and writes, and output) goes on its first call. The run id is the
file's stem (the session id).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.importers.runs import CallLog, ImportedCall, ImportedRun, TrajectoryError
from streams.importers.source_fields import (
    as_int,
    epoch_ms,
    load_json_lines,
    text_of,
    transcript_run,
)

NAME = "openclaw"
SUFFIX = ".jsonl"
INPUT_USAGE = ("input", "cacheRead", "cacheWrite")


def read_openclaw(path: Path) -> list[ImportedRun]:
    records = load_json_lines(path)
    entries = [
        entry
        for entry in active_branch(records)
        if entry.get("type") == "message" and isinstance(entry.get("message"), dict)
    ]
    if not entries:
        raise TrajectoryError("not an OpenClaw session transcript (no message entries)")
    log = CallLog()
    for entry in entries:
        message = entry["message"]
        at = epoch_ms(message.get("timestamp")) or epoch_ms(entry.get("timestamp"))
        if message.get("role") == "assistant":
            ask(log, message, at)
        elif message.get("role") == "toolResult":
            answer(log, message, at)
    return [transcript_run(path.stem, log, records)]


def active_branch(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries from the root to the last entry, following ``parentId``; a file whose
    entries have no ids (or a broken chain) is taken in file order."""
    by_id = {record["id"]: record for record in records if isinstance(record.get("id"), str)}
    tree = [record for record in records if "parentId" in record]
    if not tree:
        return records
    branch = []
    entry: dict[str, Any] | None = tree[-1]
    while entry is not None:
        branch.append(entry)
        parent = entry.get("parentId")
        if parent is None:
            break
        entry = by_id.get(parent)
        if entry is None or len(branch) > len(records):  # a missing parent, or a cycle
            return records
    return branch[::-1]


def ask(log: CallLog, message: dict[str, Any], at: int | None) -> None:
    input_tokens, output_tokens = turn_usage(message.get("usage"))
    content = message.get("content") if isinstance(message.get("content"), list) else []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "toolCall":
            continue
        arguments = block.get("arguments") if isinstance(block.get("arguments"), dict) else {}
        call_id = block.get("id") if isinstance(block.get("id"), str) else None
        call = ImportedCall(
            str(block.get("name")),
            arguments,
            call_id,
            called_at=at,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        log.ask(call, call_id)
        input_tokens = output_tokens = None  # the turn's first call only


def turn_usage(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    inputs = [
        count for count in (as_int(usage.get(key)) for key in INPUT_USAGE) if count is not None
    ]
    return (sum(inputs) if inputs else None), as_int(usage.get("output"))


def answer(log: CallLog, message: dict[str, Any], at: int | None) -> None:
    key = message.get("toolCallId")
    if message.get("isError") is True:
        log.answer(key, error=text_of(message.get("content")).strip() or "error", at=at)
        return
    result: dict[str, Any] = {"content": message.get("content")}
    if "details" in message:
        result["details"] = message["details"]
    log.answer(key, result, at=at)
