"""``loopguard replay`` and ``loopguard export``: their flags, and the order in which a command
reads, replays, compares, publishes and reports (the work itself is in :mod:`streams.replay`).

Exit codes of replay: 0 when every compared run matches, 3 on any divergence, 1 when a
``--run`` could not be verified, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.cli.common import (
    EXIT_DIVERGED,
    EXIT_ERROR,
    EXIT_OK,
    InputError,
    add_topic_args,
    run_reporting_errors,
    settings_from_args,
)
from streams.cli.times import TIME_HELP, time_arg
from streams.replay.agent_cycles import with_agent_cycles
from streams.replay.compare import (
    DIVERGED,
    INCOMPLETE,
    NOT_FOUND,
    RunReport,
    attach_divergence_events,
    compare_with_audit,
    replay_selection,
)
from streams.replay.event_file import write_event_lines, write_events_atomically
from streams.replay.incidents import with_incidents
from streams.replay.publish import publish_decisions
from streams.replay.report import Replayed, print_report, report_dict
from streams.replay.sources import (
    FileSource,
    ReadStats,
    Selection,
    SourceError,
    TopicSource,
    open_topic_reader,
    progress_line,
)

DEFAULT_PROGRESS = 10_000


# ------------------------------------------------------------------------------ arguments


def _non_negative(what: str) -> Callable[[str], int]:
    """An argparse type: a whole number >= 0, called ``what`` in error messages."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"expected {what} >= 0, got {value}")
        return value

    return parse


def _offset_spec(text: str) -> tuple[int | None, int]:
    """``OFFSET`` (every partition) or ``PARTITION:OFFSET``."""
    part, sep, offset = text.rpartition(":")
    try:
        value = int(offset)
        partition = int(part) if sep else None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected OFFSET or PARTITION:OFFSET, got {text!r}"
        ) from None
    if value < 0 or (partition is not None and partition < 0):
        raise argparse.ArgumentTypeError(f"offsets and partitions are >= 0, got {text!r}")
    return partition, value


def add_selection_args(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN_ID",
        help=f"only {verb} this run's events; repeat for several runs (default: every run)",
    )
    parser.add_argument(
        "--since",
        type=time_arg(),
        metavar="TIME",
        help=f"only events with event_time at or after TIME: {TIME_HELP}; on the topic, "
        "reading starts at the matching offsets (offsets_for_times, with a one-minute margin)",
    )
    parser.add_argument(
        "--until",
        type=time_arg(),
        metavar="TIME",
        help="only events with event_time before TIME (same forms as --since)",
    )
    parser.add_argument(
        "--from-offset",
        type=_offset_spec,
        action="append",
        default=[],
        metavar="[PARTITION:]OFFSET",
        help="start reading the events topic at this offset: OFFSET for every partition, or "
        "PARTITION:OFFSET for one (repeatable); default: the beginning. Reading always "
        "stops at the end offsets taken when the command starts",
    )
    parser.add_argument(
        "--progress",
        type=_non_negative("a whole number"),
        default=DEFAULT_PROGRESS,
        metavar="N",
        help=f"print progress to stderr every N messages read (default {DEFAULT_PROGRESS}; "
        "0 turns it off)",
    )


def add_event_source_args(parser: argparse.ArgumentParser, verb: str) -> None:
    """Where a replaying command reads its events: an export file or the events topic, and
    which of them (runs, time range, offsets)."""
    parser.add_argument(
        "--from-file",
        metavar="FILE",
        help="read events from this JSON-lines export (`loopguard export`) instead of the "
        "events topic",
    )
    add_topic_args(parser)
    add_selection_args(parser, verb)


def add_json_report_arg(parser: argparse.ArgumentParser) -> None:
    """``--json``, as replay and backtest both print their report."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the report as one JSON object (the JSON convention: docs/cli.md)",
    )


def load_fleet_arg(path: str | None, what: str = "config") -> Any:
    """The fleet config a flag names; an invalid one is bad input (exit 2), named by ``what``."""
    # Deferred: the core loads only when a command really runs (not for --help).
    from streams.core.config import ConfigError
    from streams.core.fleet import load_fleet_config

    try:
        return load_fleet_config(path)
    except ConfigError as exc:
        raise InputError(f"invalid {what}: {exc}") from None


def add_replay_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``replay`` subparser; the caller adds ``--db`` (shared with history/runs)."""
    parser = sub.add_parser(
        "replay",
        help="re-run the detector core over recorded events and check the audit trail",
        description="Re-run the pure detector core (LoopGuard) over the events of one or "
        "more runs, or of a time range, read from the events topic or from an export file, "
        "then compare the decisions it makes with the SQL audit trail. Prints a per-run "
        "summary; for a divergence, the first differing decision (seq, expected vs recorded "
        "fields) and the event at that seq; and a note when the recorded decisions were made "
        "under another config version than --config resolves to. Exit code 0 when every "
        "compared run matches, 3 on any divergence, 1 when a --run could not be verified "
        "(no events, or its first events are not in the selection), 2 for bad input. "
        "Never writes to any topic unless --publish-to is given.",
    )
    parser.add_argument(
        "--config",
        default=os.environ.get("LOOPGUARD_CONFIG") or None,
        metavar="FILE",
        help="tools.loopDetection config file (JSON5, JSON, YAML) to replay with, as given to "
        "`loopguard worker --config` (env LOOPGUARD_CONFIG; default: the built-in defaults)",
    )
    add_event_source_args(parser, "replay")
    parser.add_argument(
        "--publish-to",
        metavar="TOPIC",
        help="also publish the replayed decisions (Avro, key = run id) of the runs in scope "
        "(incomplete ones excepted) to this topic; only ever done when given, and the "
        "control topic is never implied",
    )
    add_json_report_arg(parser)
    return parser


def add_export_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "export",
        help="dump events from the events topic to a JSON-lines file (for audits, replay)",
        description="Read events from the events topic (same selection flags as replay) and "
        "write them to a JSON-lines file, one event per line in `event_to_dict` form, in "
        "the order read. The file is written atomically. Undecodable messages are counted "
        "and reported, not written. `loopguard replay --from-file` reads the file back.",
    )
    parser.add_argument(
        "-o",
        "--out",
        required=True,
        metavar="FILE",
        help="output file ('-' for stdout; the summary then goes to stderr)",
    )
    add_topic_args(parser)
    add_selection_args(parser, "export")
    return parser


# ------------------------------------------------------------------------------- commands


def check_range(args: argparse.Namespace) -> None:
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise InputError(f"--since {args.since} must be before --until {args.until}")


def selection_from_args(args: argparse.Namespace) -> Selection:
    return Selection(frozenset(args.run), args.since, args.until)


def open_events_topic(args: argparse.Namespace, settings: Any) -> Any:
    return open_topic_reader(settings, dict(args.from_offset), args.since)


def exit_code(reports: list[RunReport]) -> int:
    """3 on any divergence; 1 when a requested run could not be verified; else 0."""
    if any(r.status == DIVERGED for r in reports):
        return EXIT_DIVERGED
    if any(r.requested and r.status in (INCOMPLETE, NOT_FOUND) for r in reports):
        return EXIT_ERROR
    return EXIT_OK


def run_replay(args: argparse.Namespace) -> int:
    return run_reporting_errors("replay", _replay, args, usage_errors=(SourceError,))


def _replay(args: argparse.Namespace) -> int:
    # Deferred: SQLAlchemy and the core load only when a replay really runs (not for --help).
    from streams.audit.store import AuditStore
    from streams.core.engine import LoopGuard
    from streams.settings import redact_url

    check_range(args)
    if args.from_file and args.from_offset:
        raise InputError("--from-offset applies to the events topic, not to --from-file")
    fleet = load_fleet_arg(args.config)
    selection = selection_from_args(args)
    settings = settings_from_args(args)
    reader = None
    if args.from_file:
        source: Any = FileSource(args.from_file)
    else:
        reader = open_events_topic(args, settings)
        source = TopicSource(reader, settings.max_message_bytes)
    store = AuditStore(args.db)
    try:
        try:
            store.decision_count()  # fail before a long replay, not after it
        except Exception as exc:  # SQLAlchemy errors vary by driver; one line is enough
            print(
                f"loopguard replay: cannot read the audit trail at {redact_url(args.db)}: "
                f"{str(exc).splitlines()[0]}",
                file=sys.stderr,
            )
            return EXIT_ERROR

        def make_stats(guard: Any) -> ReadStats:
            stats = ReadStats(progress_every=args.progress)
            stats.progress_line = lambda: progress_line(
                "replay", stats, reader, f", {len(guard.runs)} runs so far"
            )
            return stats

        started = time.monotonic()
        done = replay_selection(
            lambda: with_incidents(with_agent_cycles(LoopGuard(fleet)), fleet.incidents),
            make_stats,
            source,
            selection,
        )
        guard, runs, stats = done.guard, done.runs, done.stats
        scope = list(args.run) if args.run else sorted(runs)
        reports = compare_with_audit(guard, runs, scope, store.history, requested=bool(args.run))
    finally:
        store.close()
    attach_divergence_events(source, done.selection, reports)
    published = 0
    if args.publish_to:
        published = publish_decisions(settings, args.publish_to, reports)
    if reader is not None:
        reader.close()
    code = exit_code(reports)
    replayed = Replayed(
        source.describe(),
        args.config or "(built-in defaults)",
        stats,
        reports,
        published,
        args.publish_to,
        time.monotonic() - started,
    )
    incidents = guard.incidents()  # loop incidents of the replayed events (issue 28)
    if args.json:
        doc = report_dict(replayed, code)
        doc["incidents"] = [incident.to_dict() for incident in incidents]
        print(json.dumps(doc, ensure_ascii=False))
    else:
        print_report(replayed)
        for incident in incidents:
            print(
                f"incident {incident.incident_id} ({incident.status}): {incident.tool} "
                f"{incident.kind} {incident.detail!r}, {len(incident.runs)} runs of "
                f"{len(incident.agents)} agents"
            )
    return code


def run_export(args: argparse.Namespace) -> int:
    return run_reporting_errors("export", _export, args, usage_errors=(SourceError,))


def _export(args: argparse.Namespace) -> int:
    check_range(args)
    settings = settings_from_args(args)
    reader = open_events_topic(args, settings)
    selection = selection_from_args(args)
    stats = ReadStats(progress_every=args.progress)
    stats.progress_line = lambda: progress_line("export", stats, reader)
    to_stdout = args.out == "-"
    try:
        events = TopicSource(reader, settings.max_message_bytes).events(stats, selection)
        if to_stdout:
            runs = write_event_lines(events, sys.stdout)
            sys.stdout.flush()
        else:
            runs = write_events_atomically(Path(args.out), events)
    except OSError as exc:
        print(f"loopguard export: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        reader.close()
    summary = sys.stderr if to_stdout else sys.stdout
    print(
        f"exported {stats.selected} events of {len(runs)} run(s) from {reader.topic} to {args.out}",
        file=summary,
    )
    stats.print_undecodable(summary)
    return EXIT_OK
