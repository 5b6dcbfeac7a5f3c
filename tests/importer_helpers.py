"""Helpers of the importer tests: an imported run as the event dicts the export file holds, read
back through ``parse_event_line`` as replay reads them, and the calls in a compact form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.core.events import event_to_dict
from streams.importers.run_events import run_events
from streams.importers.runs import ImportedRun
from streams.replay.event_file import parse_event_line


def exported(run: ImportedRun, agent_id: str) -> list[dict[str, Any]]:
    """The run's events as export lines, each read back by the replay's parser."""
    events = run_events(run, agent_id)
    lines = [json.dumps(event_to_dict(event), ensure_ascii=False) for event in events]
    return [event_to_dict(parse_event_line(line)) for line in lines]


def calls(run: ImportedRun) -> list[tuple[str, dict[str, Any]]]:
    return [(call.tool_name, call.args) for call in run.calls]


def exec_details(run: ImportedRun, index: int) -> dict[str, Any]:
    """The OpenClaw exec details of the run's call ``index``."""
    return run.calls[index].result["details"]


def result_text(run: ImportedRun, index: int) -> str:
    return run.calls[index].result["content"][0]["text"]


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def write_json_lines(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path
