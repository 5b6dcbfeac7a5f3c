"""``loopguard history``, ``runs`` and ``migrate``: reading the audit trail and creating its schema.

Output is for people first (a header line, times in UTC, a notice when a limit cut the list)
and, with ``--json``, JSON lines: one object per decision or run, nothing else on stdout
(notices go to stderr), so ``jq`` and ``wc -l`` see exactly the data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streams.audit.canary import CANARY_AGENT
from streams.audit.observed import OBSERVE_ONLY, OBSERVED_ABORT
from streams.cli.common import EXIT_ERROR, EXIT_OK, add_db_arg, missing_sqlite_file, read_trail
from streams.cli.times import add_time_range_args, format_ms
from streams.core.usage import SAVINGS_METHOD, SAVINGS_METHOD_DOC
from streams.settings import DEFAULT_DB_URL, redact_url

DEFAULT_LIMIT = 50
JSON_HELP = "print JSON lines: one JSON object per line (see docs/cli.md)"


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (a limit of 0 would list nothing)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def add_query_parsers(sub: Any) -> None:
    """The ``history``, ``runs`` and ``migrate`` subparsers."""
    history = sub.add_parser(
        "history",
        help="one run's loop decisions from the audit trail, in order",
        description="One run's decisions in event order, under a line that says whose run it "
        "is and how far the worker got. Observe-only decisions (mode: observe) are marked "
        f"[{OBSERVE_ONLY}] (JSON: enforced false). A run the trail has never heard of "
        "(no decision and no recorded progress) is an error, exit code 1.",
    )
    history.add_argument("run_id", help="the run id (the events' message key)")
    add_db_arg(history)
    history.add_argument("--json", action="store_true", help=JSON_HELP + ", one per decision")

    runs = sub.add_parser(
        "runs",
        help="runs with loop decisions, newest first",
        description="One line per run, under a header: the time of its latest decision, "
        "decisions by action, observed = how many were observe-only (mode: observe); worst "
        f"action '({OBSERVE_ONLY})' when none at it was enforced, status '{OBSERVED_ABORT}' "
        "for a run whose abort was never enforced; where the run's gateway reports usage, "
        "the tokens it spent while looping and what stopping it saved, an estimate: "
        f"{SAVINGS_METHOD} ({SAVINGS_METHOD_DOC}). Filters apply to decisions. The test "
        f"loops `loopguard demo` and test harnesses send (agent {CANARY_AGENT}) are hidden "
        "unless --all is given or --agent names that agent.",
    )
    add_db_arg(runs)
    runs.add_argument("--agent", help="only decisions of this agent id")
    runs.add_argument("--gateway", help="only decisions of this gateway id")
    runs.add_argument("--detector", help="only decisions of this detector, e.g. ping_pong")
    runs.add_argument("--severity", choices=["warning", "critical"], help="only this severity")
    add_time_range_args(runs, "decisions")
    runs.add_argument(
        "--limit",
        type=positive_int,
        default=DEFAULT_LIMIT,
        help=f"at most this many runs, >= 1 (default {DEFAULT_LIMIT}); a notice says when "
        "more matched",
    )
    runs.add_argument(
        "--all",
        action="store_true",
        help=f"also list the test loops of agent {CANARY_AGENT} (demo and worker readiness checks)",
    )
    runs.add_argument("--json", action="store_true", help=JSON_HELP + ", one per run")

    migrate = sub.add_parser(
        "migrate",
        help="create or upgrade the audit trail's schema (Alembic)",
        description="Bring the audit trail's schema to the latest revision (alembic upgrade "
        "head); safe to run again. Workers also migrate at start-up. For an SQLite file, "
        "the folder must exist (only the default loopguard-data/ is created).",
    )
    add_db_arg(migrate)


def _say_json(rows: Sequence[dict[str, Any]]) -> None:
    for row in rows:
        print(json.dumps(row, ensure_ascii=False))


def run_history(args: argparse.Namespace) -> int:
    with read_trail(args.db) as store:
        decisions = store.history(args.run_id)
        progress = store.run_progress(args.run_id)
    if not decisions and progress is None:
        print(
            f"loopguard history: no run {args.run_id!r} in the audit trail at "
            f"{redact_url(args.db)} (`loopguard runs` lists the runs with decisions)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    if args.json:
        _say_json([d.to_dict() for d in decisions])
        return EXIT_OK
    first = decisions[0] if decisions else None
    agent = progress.agent_id if progress else first.agent_id if first else "?"
    gateway = progress.gateway_id if progress else first.gateway_id if first else "?"
    where = f"status {progress.status}, {progress.events} events" if progress else "no progress"
    print(
        f"run {args.run_id} (agent {agent}, gateway {gateway}): {len(decisions)} decisions, {where}"
    )
    if not decisions:
        return EXIT_OK
    print(f"{'seq':>6}  {'time (UTC)':<20}  {'action':<6} {'detector':<24} {'tool':<16} reason")
    for d in decisions:
        shadow = "" if d.enforced else f"[{OBSERVE_ONLY}] "
        print(
            f"{d.seq:>6}  {format_ms(d.event_time):<20}  {d.action.value:<6} {d.detector:<24} "
            f"{d.tool_name:<16} count={d.count} {shadow}{d.reason}"
        )
    return EXIT_OK


RUN_COLUMNS: tuple[str, ...] = (
    "last decision (UTC)",
    "run",
    "agent",
    "gateway",
    "worst",
    "warn",
    "block",
)
RUN_COLUMNS += ("abort", "observed", "status", "events", "detectors", "loop tokens", "saved (est.)")


def _run_row(s: Any, usage: dict[str, Any] | None = None) -> list[str]:
    worst = s.worst_action.value + (f" ({OBSERVE_ONLY})" if s.worst_observed else "")
    return [
        format_ms(s.last_decision_time),
        s.run_id,
        s.agent_id,
        s.gateway_id,
        worst,
        str(s.warn),
        str(s.block),
        str(s.abort),
        str(s.observed),
        _or_dash(s.status),
        _or_dash(s.events),
        ",".join(s.detectors),
        _or_dash(usage and usage["loop_tokens"]),
        _or_dash(usage and usage["saved_tokens"]),
    ]


def _with_usage(row: dict[str, Any], usage: dict[str, Any] | None) -> dict[str, Any]:
    """A run's JSON line with its usage (issue 28): ``null`` when its gateway reports none;
    ``saved_tokens`` is an estimate (docs/reference.md, "How the saved estimate is made")."""
    return {**row, "usage": usage}


def savings_note() -> str:
    """The line under a table that shows ``saved (est.)``: how it is estimated, and where
    the method is explained (issue 41)."""
    return f"saved (est.): {SAVINGS_METHOD} ({SAVINGS_METHOD_DOC})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns as wide as their widest cell; the last column is not padded."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


def run_runs(args: argparse.Namespace) -> int:
    hide = () if args.all or args.agent == CANARY_AGENT else (CANARY_AGENT,)
    filters = {
        "agent": args.agent,
        "gateway": args.gateway,
        "detector": args.detector,
        "severity": args.severity,
        "since_ms": args.since,
        "until_ms": args.until,
    }
    with read_trail(args.db) as store:
        # One more than shown says whether the limit cut the list.
        summaries = store.runs(**filters, limit=args.limit + 1, exclude_agents=hide)
        hidden_only = not summaries and bool(hide) and bool(store.runs(**filters, limit=1))
        usage = store.run_usage(s.run_id for s in summaries[: args.limit])
    cut = len(summaries) > args.limit
    summaries = summaries[: args.limit]
    notice = f"showing the newest {args.limit} runs; more match (--limit N shows more)"
    if args.json:
        _say_json([_with_usage(s.to_dict(), usage.get(s.run_id)) for s in summaries])
        if cut:
            print(f"loopguard runs: {notice}", file=sys.stderr)
        return EXIT_OK
    if not summaries:
        hidden = f" but test loops of agent {CANARY_AGENT} (--all shows them)"
        print(f"no runs match{hidden if hidden_only else ''}")
        return EXIT_OK
    for line in table(RUN_COLUMNS, [_run_row(s, usage.get(s.run_id)) for s in summaries]):
        print(line)
    if any(row["saved_tokens"] for row in usage.values()):
        print(savings_note())
    if cut:
        print(notice)
    return EXIT_OK


def _or_dash(value: object) -> str:
    """A run's progress field, or ``-`` while no watermark of the run has been recorded."""
    return "-" if value is None else str(value)


def run_migrate(args: argparse.Namespace) -> int:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from streams.audit.database import migrate

    shown = redact_url(args.db)
    try:
        make_url(args.db)
    except ArgumentError:
        print(f"loopguard migrate: --db {shown} is not a database URL", file=sys.stderr)
        return EXIT_ERROR
    missing = missing_sqlite_file(args.db)
    default_folder = Path(DEFAULT_DB_URL.removeprefix("sqlite:///")).parent
    folder = Path(missing).parent if missing is not None else None
    if folder is not None and not folder.is_dir() and folder != default_folder:
        print(
            f"loopguard migrate: folder {folder} does not exist (create it first, or give "
            "--db a file in an existing folder)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    migrate(args.db)
    print(f"audit schema is at head on {shown}")
    return EXIT_OK
