"""``loopguard quality``: how often each rule's stops were right, by what operators did about
them (issue 43): per rule and per agent, the runs it stopped, the runs an operator released
(a false stop) or aborted (a true loop), the release rate; and, replaying the labelled runs'
events, what a stricter or looser threshold would have changed on them.

The counts need the audit trail alone (streams.audit.labels); the what-if reads the labelled
runs' events from an export (``--from-file``) or the events topic (``--from-topic``) and
re-runs the core with each rule's threshold moved by -2..+2 (streams.replay.thresholds).
Exit codes as every query command: 0 once reported, 1 when the trail or the broker cannot be
read, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from streams.cli.common import (
    EXIT_OK,
    add_db_arg,
    read_trail,
    run_reporting_errors,
    settings_from_args,
)
from streams.cli.query_commands import JSON_HELP, table
from streams.cli.replay_commands import (
    add_event_source_args,
    check_range,
    load_fleet_arg,
    open_events_topic,
)

COUNT_COLUMNS = ("rule", "agent", "stops", "releases", "release rate", "operator aborts")
WHATIF_COLUMNS = ("threshold", "false stops still stopped", "true stops stopped")


def add_quality_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "quality",
        help="per rule and agent: stops, operator releases and aborts, the release rate, "
        "and what another threshold would have changed on the labelled runs",
        description="How right each rule's stops were, by what operators did about them: "
        "from the audit trail at --db, per rule (detector) and per agent, the runs it "
        "stopped (an enforced block or abort), the runs an operator released (`loopguard "
        "release`: a labelled false stop of the rule whose stop was lifted) and aborted "
        "(`loopguard abort`: a labelled true loop), and the release rate (releases / "
        "stops). With --from-file FILE or --from-topic, the labelled runs' events are "
        "replayed through the core with each labelled rule's stop threshold moved by -2, "
        "-1, +1 and +2 in every block of --config: per threshold, how many released runs it "
        "would still stop and how many aborted ones it would stop. Nothing is written.",
    )
    add_db_arg(parser)
    parser.add_argument("--agent", metavar="AGENT", help="only this agent's runs")
    parser.add_argument(
        "--config",
        default=os.environ.get("LOOPGUARD_CONFIG") or None,
        metavar="FILE",
        help="the config the thresholds are moved from (env LOOPGUARD_CONFIG; default: the "
        "built-in defaults)",
    )
    parser.add_argument(
        "--from-topic",
        action="store_true",
        help="replay the labelled runs' events from the events topic (see --broker)",
    )
    add_event_source_args(parser, "replay for the threshold what-if")
    parser.add_argument("--json", action="store_true", help=JSON_HELP + ", one document")


def run_quality(args: argparse.Namespace) -> int:
    return run_reporting_errors("quality", _quality, args)


def _quality(args: argparse.Namespace) -> int:
    from streams.audit.labels import trail_quality

    check_range(args)
    with read_trail(args.db) as store:
        quality = trail_quality(store, args.agent)
    labels = {
        run_id: (label.rule, label.stuck)
        for run_id, label in quality.labels.items()
        if not args.run or run_id in args.run
    }
    what_if = None
    if labels and (args.from_file or args.from_topic):
        what_if = _what_if(args, labels)
    if args.json:
        print(json.dumps(_document(quality, what_if), ensure_ascii=False))
        return EXIT_OK
    for line in _report(quality, what_if, bool(args.from_file or args.from_topic)):
        print(line)
    return EXIT_OK


def _what_if(args: argparse.Namespace, labels: dict[str, tuple[str, bool]]) -> list[Any]:
    from streams.replay.sources import FileSource, ReadStats, Selection, TopicSource
    from streams.replay.thresholds import threshold_whatif

    fleet = load_fleet_arg(args.config, "--config config")
    selection = Selection(frozenset(labels), args.since, args.until)
    reader = None
    try:
        if args.from_file:
            source: Any = FileSource(args.from_file)
        else:
            settings = settings_from_args(args)
            reader = open_events_topic(args, settings)
            source = TopicSource(reader, settings.max_message_bytes)
        events = list(source.events(ReadStats(progress_every=args.progress), selection))
    finally:
        if reader is not None:
            reader.close()
    return threshold_whatif(fleet, events, labels)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _report(quality: Any, what_if: list[Any] | None, replayed: bool) -> list[str]:
    if not quality.rules:
        return ["no stops, releases or operator aborts in the audit trail"]
    rows: list[list[str]] = []
    for rule in sorted(quality.rules):
        counts = quality.rules[rule]
        rows.append([rule, "(all)", *_cells(counts)])
        for (named, agent), per_agent in sorted(quality.agents.items()):
            if named == rule:
                rows.append(["", agent, *_cells(per_agent)])
    lines = table(COUNT_COLUMNS, rows)
    released = sum(not label.stuck for label in quality.labels.values())
    lines.append(
        f"labelled runs: {released} released (false stops), "
        f"{len(quality.labels) - released} aborted by an operator (true loops)"
    )
    if what_if is None:
        if quality.labels and not replayed:
            lines.append(
                "threshold what-if: give --from-file FILE or --from-topic to replay the "
                "labelled runs' events"
            )
        return lines
    for rule in what_if:
        lines.append("")
        lines.append(
            f"{rule.rule} ({rule.field_name}): {rule.false_stops} released, "
            f"{rule.true_stops} aborted by an operator"
        )
        variant_rows = [
            [
                f"{v.value} ({'now' if v.delta == 0 else f'{v.delta:+d}'})",
                f"{v.false_stops_kept} of {rule.false_stops}",
                f"{v.true_stops_caught} of {rule.true_stops}",
            ]
            for v in rule.variants
        ]
        lines.extend(f"  {line}" for line in table(WHATIF_COLUMNS, variant_rows))
    return lines


def _cells(counts: Any) -> list[str]:
    return [str(counts.stops), str(counts.releases), _rate(counts.release_rate), str(counts.aborts)]


def _document(quality: Any, what_if: list[Any] | None) -> dict[str, Any]:
    return {
        "rules": {
            rule: {
                **counts.to_dict(),
                "agents": {
                    agent: per_agent.to_dict()
                    for (named, agent), per_agent in sorted(quality.agents.items())
                    if named == rule
                },
            }
            for rule, counts in sorted(quality.rules.items())
        },
        "labels": [
            {
                "run_id": label.run_id,
                "agent_id": label.agent_id,
                "stuck": label.stuck,
                "rule": label.rule,
                "why": label.why,
            }
            for label in sorted(quality.labels.values(), key=lambda label: label.run_id)
        ],
        "threshold_what_if": None if what_if is None else [rule.to_dict() for rule in what_if],
    }
