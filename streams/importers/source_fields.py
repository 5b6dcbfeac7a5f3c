"""Reading the sources' fields: whole JSON and JSON-lines files (anything else is no
trajectory), timestamps in their several forms, message content as text, whole numbers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streams.importers.runs import CallLog, ImportedRun, TrajectoryError


def load_json(path: Path) -> Any:
    """A whole JSON file; a file that is no JSON is no trajectory."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise TrajectoryError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise TrajectoryError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None


def load_json_lines(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines file as its objects; blank lines are skipped, anything else is refused."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TrajectoryError("not UTF-8 text") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryError(f"line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise TrajectoryError(f"line {number}: not a JSON object")
        records.append(record)
    return records


def epoch_ms(value: Any) -> int | None:
    """A source timestamp in epoch ms: ISO 8601 text (UTC unless it names a zone), or a number
    of seconds (or of milliseconds, when it is too large to be seconds)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value if value > 1e11 else value * 1000)
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def transcript_run(run_id: str, log: CallLog, records: list[dict[str, Any]]) -> ImportedRun:
    """A session transcript's run: its calls, from its earliest to its latest timestamped
    record (Claude Code's and OpenClaw's JSON lines both stamp each record)."""
    times = [time for time in (epoch_ms(r.get("timestamp")) for r in records) if time is not None]
    return ImportedRun(
        run_id,
        tuple(log.calls),
        started_at=min(times) if times else None,
        ended_at=max(times) if times else None,
    )


def text_of(content: Any) -> str:
    """Message content as text: a string as it is, a list of blocks as their texts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            block["text"]
            for block in content
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        ]
        return "\n".join(parts)
    return ""


def as_int(value: Any) -> int | None:
    """A whole number from a source field (bools and junk are None)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None
