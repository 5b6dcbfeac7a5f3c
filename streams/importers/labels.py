"""Outcome labels from a SWE-bench results file: which runs resolved their task.

Two shapes are read: the harness's summary report (``resolved`` or ``resolved_ids``: a list of
instance ids; every id in its other lists, ``completed_ids``, ``unresolved_ids``,
``empty_error_patch_ids``, ..., is unresolved) and a per-instance report (``{id: {"resolved":
true|false, ...}}``). A run the file does not name is ``unknown``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.importers.runs import RESOLVED, UNKNOWN, UNRESOLVED

RESOLVED_KEYS = ("resolved", "resolved_ids")


class LabelError(ValueError):
    """The results file cannot be read as SWE-bench results; the message says why."""


def load_results(path: Path) -> dict[str, str]:
    """Instance id → ``resolved`` or ``unresolved``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LabelError(f"--results {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LabelError(f"--results {path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise LabelError(
            f"--results {path}: not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    if not isinstance(data, dict):
        raise LabelError(f"--results {path}: expected a JSON object of SWE-bench results")
    labels = summary_labels(data)
    if labels is None:
        labels = per_instance_labels(data)
    if labels is None:
        raise LabelError(
            f"--results {path}: no `resolved` list of instance ids and no per-instance "
            '{"resolved": true|false} reports'
        )
    return labels


def is_id_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def summary_labels(data: dict[str, Any]) -> dict[str, str] | None:
    resolved_key = next((key for key in RESOLVED_KEYS if is_id_list(data.get(key))), None)
    if resolved_key is None:
        return None
    labels = {
        instance: UNRESOLVED
        for key, value in data.items()
        if key not in RESOLVED_KEYS and is_id_list(value)
        for instance in value
    }
    labels.update(dict.fromkeys(data[resolved_key], RESOLVED))
    return labels


def per_instance_labels(data: dict[str, Any]) -> dict[str, str] | None:
    reports = {
        key: value["resolved"]
        for key, value in data.items()
        if isinstance(value, dict) and isinstance(value.get("resolved"), bool)
    }
    if not reports:
        return None
    return {key: RESOLVED if resolved else UNRESOLVED for key, resolved in reports.items()}


def outcome_of(run_id: str, results: dict[str, str] | None, own: str | None) -> str:
    """The run's label: the results file's when one is given (``unknown`` if it does not name
    the run), else the label the trajectory carries, else ``unknown``."""
    if results is not None:
        return results.get(run_id, UNKNOWN)
    return own or UNKNOWN
