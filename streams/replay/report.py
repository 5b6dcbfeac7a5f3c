"""How a replay is reported: one JSON document (``--json``) or text lines for a person, both
from the same :class:`~streams.replay.compare.RunReport` values.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Any, TextIO

from streams.core.events import Decision, event_to_dict
from streams.replay.compare import (
    DIVERGED,
    INCOMPLETE,
    MATCH,
    NOT_FOUND,
    Divergence,
    RunReport,
    status_counts,
)
from streams.replay.sources import ReadStats


def _jsonable(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def divergence_dict(div: Divergence) -> dict[str, Any]:
    return {
        "seq": div.seq,
        "expected": div.expected.to_dict() if div.expected else None,
        "recorded": div.recorded.to_dict() if div.recorded else None,
        "fields": [
            {"field": name, "expected": _jsonable(exp), "recorded": _jsonable(rec)}
            for name, exp, rec in div.fields
        ],
        "event": event_to_dict(div.event) if div.event else None,
    }


def run_report_dict(report: RunReport) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "agent_id": report.agent_id,
        "status": report.status,
        "requested": report.requested,
        "events": report.events,
        "first_seq": report.first_seq,
        "last_seq": report.last_seq,
        "waiting": report.waiting,
        "duplicates": report.duplicates,
        "replayed": report.replayed,
        "recorded": report.recorded,
        "recorded_beyond_selection": report.beyond,
        "divergence": divergence_dict(report.divergence) if report.divergence else None,
        "replay_config_version": report.replay_version,
        "recorded_config_versions": report.recorded_versions,
        "config_version_differs": report.version_differs,
    }


def _brief(d: Decision) -> str:
    return (
        f"action={d.action.value} detector={d.detector} severity={d.severity} count={d.count} "
        f"tool={d.tool_name} error_code={d.error_code or '-'} reason={d.reason!r}"
    )


def describe_divergence(div: Divergence) -> list[str]:
    exp, rec = div.expected, div.recorded
    if exp is not None and rec is not None:
        lines = [f"first divergence at seq {div.seq}: the decisions differ"]
        lines += [
            f"  {name}: expected {_jsonable(e)!r}, recorded {_jsonable(r)!r}"
            for name, e, r in div.fields
        ]
    elif exp is not None:
        lines = [
            f"first divergence at seq {div.seq}: replay decides "
            f"{exp.action.value}/{exp.detector}, the audit trail has no such decision",
            f"  expected: {_brief(exp)}",
        ]
    else:
        assert rec is not None
        lines = [
            f"first divergence at seq {div.seq}: the audit trail records "
            f"{rec.action.value}/{rec.detector}, replay does not decide it",
            f"  recorded: {_brief(rec)}",
        ]
    if div.event is None:
        lines.append(f"event at seq {div.seq}: not in the selection")
    else:
        text = json.dumps(event_to_dict(div.event), ensure_ascii=False)
        lines.append(f"event at seq {div.seq}: {text}")
    return lines


def describe_run(report: RunReport) -> list[str]:
    head = (
        f"run {report.run_id}  agent={report.agent_id or '-'}  events={report.events}  "
        f"decisions: replayed {report.replayed}, recorded {report.recorded}  "
        f"{report.status.upper().replace('_', ' ')}"
    )
    lines = [head]
    if report.status == INCOMPLETE:
        lines.append(
            f"  not compared: its events start at seq {report.first_seq}; events before "
            "that are not in the selection, so its state cannot be re-derived"
        )
        return lines
    if report.status == NOT_FOUND:
        lines.append("  not compared: no events of this run in the selection")
        return lines
    if report.divergence is not None:
        lines += [f"  {line}" for line in describe_divergence(report.divergence)]
    if report.beyond:
        lines.append(
            f"  {report.beyond} recorded decision(s) after seq {report.last_seq} (the last "
            "replayed event) not compared"
        )
    if report.waiting:
        lines.append(
            f"  {report.waiting} event(s) wait behind a missing seq after {report.last_seq} "
            "(held back, as a worker holds them)"
        )
    if report.recorded_versions and report.version_differs:
        lines.append(
            "  note: the recorded decisions were made under config version "
            f"{', '.join(report.recorded_versions)}; the replay config resolves to "
            f"{report.replay_version} for agent {report.agent_id or '-'}: the config in force "
            "differed"
        )
    return lines


@dataclass
class Replayed:
    """One replay as reported: where its events came from, with which config, what was read,
    the per-run reports, what was published and how long it took."""

    source: str
    config: str
    stats: ReadStats
    reports: list[RunReport]
    published: int = 0
    publish_topic: str | None = None
    elapsed: float = 0.0


def report_dict(replayed: Replayed, code: int) -> dict[str, Any]:
    """The whole replay as one JSON-ready document (``code``: the command's exit code)."""
    stats = replayed.stats
    return {
        "source": replayed.source,
        "config": replayed.config,
        "messages": stats.messages,
        "events": stats.selected,
        "undecodable": stats.undecodable,
        "undecodable_samples": stats.samples,
        "runs": [run_report_dict(r) for r in replayed.reports],
        "summary": status_counts(replayed.reports),
        "published": replayed.published,
        "publish_topic": replayed.publish_topic,
        "exit_code": code,
        "seconds": round(replayed.elapsed, 3),
    }


def print_report(replayed: Replayed, out: TextIO | None = None) -> None:
    """The whole replay as text (stdout unless ``out`` is given)."""
    out = out or sys.stdout
    print(
        f"replayed {replayed.stats.selected} events of {len(replayed.reports)} run(s) from "
        f"{replayed.source} with config {replayed.config} in {replayed.elapsed:.1f}s",
        file=out,
    )
    replayed.stats.print_undecodable(out)
    for report in replayed.reports:
        for line in describe_run(report):
            print(line, file=out)
    counts = status_counts(replayed.reports)
    print(
        f"summary: {counts[MATCH]} match, {counts[DIVERGED]} diverged, "
        f"{counts[INCOMPLETE]} incomplete, {counts[NOT_FOUND]} without events",
        file=out,
    )
    if replayed.publish_topic:
        print(
            f"published {replayed.published} replayed decision(s) to {replayed.publish_topic}",
            file=out,
        )
