"""``loopguard backtest``: replay recorded traffic with a candidate config and report how its
warns, blocks and aborts differ from a baseline (the work is in :mod:`streams.replay.backtest`).

The reading, selection and comparison flags are replay's (same meaning, same errors); what is
added is the choice of baseline: the audit trail at ``--db``, or, with ``--baseline-config`` or
for an event file with no trail next to it, the decisions another config makes on the same
events. Exit codes: 0 once reported (changes are the answer, not a failure), 1 when a ``--run``
could not be compared or the broker/database is unreachable, 2 for bad input.

``--per-rule`` (issue 29) compares the candidate with ``--baseline-config`` one rule switch at
a time (streams.replay.per_rule): the migration path from ``compat: "openclaw"``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from streams.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    InputError,
    add_db_arg,
    missing_sqlite_file,
    read_trail,
    run_reporting_errors,
    settings_from_args,
)
from streams.cli.replay_commands import (
    add_event_source_args,
    add_json_report_arg,
    check_range,
    load_fleet_arg,
    open_events_topic,
    selection_from_args,
)
from streams.replay.agent_cycles import with_agent_cycles
from streams.replay.backtest import CONFIG, TRAIL, Baseline, PairedGuard, backtest, cached
from streams.replay.backtest_report import Backtested, backtest_dict, print_backtest
from streams.replay.compare import INCOMPLETE, NOT_FOUND, compare_with_audit, replay_events
from streams.replay.incidents import with_incidents
from streams.replay.sources import FileSource, ReadStats, SourceError, TopicSource, progress_line

COMPARE_PROGRESS_RUNS = 1_000  # a progress line per this many runs compared (trail queries)


def add_backtest_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "backtest",
        help="replay recorded traffic with a candidate config: what would it warn, block, abort",
        description="Re-run the pure detector core with a CANDIDATE config over recorded "
        "events (the events topic, or an export file with --from-file) and report, per agent "
        "and detector, how many warns, blocks and aborts it would decide against the baseline, "
        "and which runs it would newly block or abort, no longer block or abort, or stop at "
        "another seq. Baseline: the decisions recorded in the audit trail at --db for the same "
        "runs, compared up to the last replayed event of each run; with --baseline-config "
        "FILE, or with --from-file when there is no audit trail at --db, the decisions FILE "
        "(default: LOOPGUARD_CONFIG, else the built-in defaults) makes on the same events. The "
        "report says which baseline was used. Runs whose first events are outside the "
        "selection are not compared. The events are what happened under the config in force: "
        "after a recorded block or abort they show the gateway's enforcement, not what the "
        "agent would have done without it; each side's decisions count up to its first abort of a "
        "run, where the run ends. Nothing is written anywhere. Exit code 0 once "
        "reported, 1 when a --run could not be compared or the broker or database cannot be "
        "reached, 2 for bad input.",
    )
    parser.add_argument(
        "--config",
        required=True,
        metavar="CANDIDATE",
        help="the candidate tools.loopDetection config file (JSON5, JSON, YAML; the format "
        "of `loopguard worker --config`, per-agent overrides included)",
    )
    parser.add_argument(
        "--baseline-config",
        metavar="FILE",
        help="compare with the decisions this config makes on the same events instead of "
        "the audit trail",
    )
    parser.add_argument(
        "--per-rule",
        action="store_true",
        help="with --baseline-config: switch each rule (deviations.*, detectors."
        "consecutiveErrors/errorRepeat/compactionStorm) the candidate sets otherwise alone "
        "over the baseline, and report per rule the runs and calls whose verdict it changes "
        "and by how many calls it stops loops earlier or later",
    )
    parser.add_argument(
        "--labels-from-audit",
        metavar="DB_URL",
        help="score both sides on the runs operators labelled in this audit trail (issue 43): "
        "a released run is a false stop, a run an operator aborted a true loop; the report "
        "says how many of each the baseline and the candidate stop",
    )
    add_event_source_args(parser, "backtest")
    add_db_arg(parser)
    add_json_report_arg(parser)
    return parser


def run_backtest(args: argparse.Namespace) -> int:
    work = _per_rule if args.per_rule else _backtest
    return run_reporting_errors("backtest", work, args, usage_errors=(SourceError,))


def _baseline(args: argparse.Namespace) -> tuple[Baseline, Any, Any]:
    """The baseline, with its guard (config baseline) or its open audit store (trail)."""
    from streams.core.engine import LoopGuard
    from streams.settings import redact_url

    if args.baseline_config:
        fleet = load_fleet_arg(args.baseline_config, "--baseline-config config")
        described = f"decisions of config {args.baseline_config} on the same events"
        return Baseline(CONFIG, described), with_agent_cycles(LoopGuard(fleet)), None
    if args.from_file and missing_sqlite_file(args.db) is not None:
        current = os.environ.get("LOOPGUARD_CONFIG") or ""
        fleet = load_fleet_arg(current, "LOOPGUARD_CONFIG config")
        named = current or "the built-in defaults, LOOPGUARD_CONFIG being unset"
        described = f"decisions of the current config ({named}) on the same events"
        reason = f"no audit trail at {redact_url(args.db)}"
        return Baseline(CONFIG, described, reason), with_agent_cycles(LoopGuard(fleet)), None
    store = read_trail(args.db)
    return (
        Baseline(TRAIL, f"decisions recorded in the audit trail {redact_url(args.db)}"),
        None,
        store,
    )


def _compare_progress(history: Any, total: int, every: int) -> Any:
    """``history`` with a progress line on stderr every ``every`` runs (0: none)."""
    asked = 0

    def lookup(run_id: str) -> Any:
        nonlocal asked
        asked += 1
        if every and asked % every == 0:
            print(f"backtest: compared {asked} of {total} runs", file=sys.stderr, flush=True)
        return history(run_id)

    return lookup


def _backtest(args: argparse.Namespace) -> int:
    from streams.core.engine import LoopGuard

    check_range(args)
    if args.from_file and args.from_offset:
        raise InputError("--from-offset applies to the events topic, not to --from-file")
    fleet = load_fleet_arg(args.config, "--config config")
    candidate = with_agent_cycles(LoopGuard(fleet))  # and loops between agents (issue 28)
    selection = selection_from_args(args)
    reader = None
    if args.from_file:
        source: Any = FileSource(args.from_file)
    baseline, baseline_guard, store = _baseline(args)
    try:
        if not args.from_file:
            settings = settings_from_args(args)
            reader = open_events_topic(args, settings)
            source = TopicSource(reader, settings.max_message_bytes)
        guard: Any = candidate
        if baseline_guard is not None:
            guard = PairedGuard(candidate, baseline_guard)
        guard = with_incidents(guard, fleet.incidents)  # the candidate's loop incidents
        stats = ReadStats(progress_every=args.progress)
        stats.progress_line = lambda: progress_line(
            "backtest", stats, reader, f", {len(candidate.runs)} runs so far"
        )
        started = time.monotonic()
        runs = replay_events(guard, source.events(stats, selection))
        scope = list(args.run) if args.run else sorted(runs)
        history = cached(guard.history if store is None else store.history)
        every = COMPARE_PROGRESS_RUNS if args.progress and len(scope) > COMPARE_PROGRESS_RUNS else 0
        reports = compare_with_audit(
            candidate, runs, scope, _compare_progress(history, len(scope), every), bool(args.run)
        )
        result = backtest(reports, history)
        labelled = _labelled(args, runs, history)
    finally:
        if store is not None:
            store.close()
        if reader is not None:
            reader.close()
    code = EXIT_OK
    if any(r.requested and r.status in (INCOMPLETE, NOT_FOUND) for r in reports):
        code = EXIT_ERROR
    done = Backtested(
        source.describe(), args.config, baseline, stats, result, time.monotonic() - started
    )
    incidents = guard.incidents()
    if args.json:
        doc = backtest_dict(done, code)
        doc["incidents"] = [incident.to_dict() for incident in incidents]
        if labelled is not None:
            doc["labelled"] = labelled.to_dict()
        print(json.dumps(doc, ensure_ascii=False))  # one JSON line
    else:
        print_backtest(done)
        for line in labelled.lines() if labelled is not None else []:
            print(line)
        for incident in incidents:
            print(
                f"incident {incident.incident_id} ({incident.status}): {incident.tool} "
                f"{incident.kind} {incident.detail!r}, {len(incident.runs)} runs of "
                f"{len(incident.agents)} agents"
            )
    return code


def _labelled(args: argparse.Namespace, runs: dict[str, Any], history: Any) -> Any:
    """Both sides' stops of the runs operators labelled (``--labels-from-audit``), or None."""
    if not args.labels_from_audit:
        return None
    from streams.audit.labels import trail_quality
    from streams.replay.labelled import score_labelled
    from streams.settings import redact_url

    with read_trail(args.labels_from_audit) as trail:
        found = trail_quality(trail).labels
    labels = {run_id: (label.stuck, label.why) for run_id, label in found.items()}
    candidate = {run_id: run.decisions for run_id, run in runs.items()}
    return score_labelled(redact_url(args.labels_from_audit), labels, candidate, history)


def _per_rule(args: argparse.Namespace) -> int:
    """``--per-rule``: the candidate's rule switches, one at a time, against the baseline."""
    from streams.replay.per_rule import per_rule_backtest
    from streams.replay.per_rule_report import PerRuleBacktested, per_rule_dict, print_per_rule

    check_range(args)
    if not args.baseline_config:
        raise InputError(
            "--per-rule switches the candidate's rules one at a time over a baseline config: "
            'give --baseline-config FILE (the config in force, e.g. compat: "openclaw")'
        )
    if args.from_file and args.from_offset:
        raise InputError("--from-offset applies to the events topic, not to --from-file")
    candidate = load_fleet_arg(args.config, "--config config")
    baseline = load_fleet_arg(args.baseline_config, "--baseline-config config")
    selection = selection_from_args(args)
    reader = None
    try:
        if args.from_file:
            source: Any = FileSource(args.from_file)
        else:
            settings = settings_from_args(args)
            reader = open_events_topic(args, settings)
            source = TopicSource(reader, settings.max_message_bytes)
        stats = ReadStats(progress_every=args.progress)
        stats.progress_line = lambda: progress_line("backtest", stats, reader, "")
        started = time.monotonic()
        result = per_rule_backtest(baseline, candidate, source.events(stats, selection))
    finally:
        if reader is not None:
            reader.close()
    code = EXIT_OK
    if args.run and any(run_id in result.skipped for run_id in args.run):
        code = EXIT_ERROR
    done = PerRuleBacktested(
        source.describe(),
        args.config,
        args.baseline_config,
        stats,
        result,
        time.monotonic() - started,
    )
    if args.json:
        print(json.dumps(per_rule_dict(done, code), ensure_ascii=False))  # one JSON line
    else:
        print_per_rule(done)
    return code
