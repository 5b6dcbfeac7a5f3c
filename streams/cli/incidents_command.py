"""``loopguard incidents``: loop incidents from the audit trail (issue 28), newest first.

One line per incident under a header (times in UTC), or with ``--json`` one JSON object per
incident (JSON lines, nothing else on stdout), as every query command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from streams.cli.common import EXIT_OK, add_db_arg, read_trail
from streams.cli.query_commands import JSON_HELP, positive_int, table
from streams.cli.times import format_ms

DEFAULT_LIMIT = 50
COLUMNS = (
    "opened (UTC)",
    "incident",
    "status",
    "tool",
    "runs",
    "agents",
    "closed (UTC)",
    "what",
)


def add_incidents_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "incidents",
        help="loop incidents: one tool failing or looping the same way in many runs at once",
        description="Loop incidents the workers recorded (tools.loopDetection.incidents): a "
        "tool and its normalised error, a cycle of agents passing the same messages round, or "
        "a repeated call's args hash, shared by at least minRuns runs of minAgents agents "
        "within one window. Newest first; an incident is open until a whole window passes "
        "without its signature (one still open a minute after that has no worker left to "
        "close it, and shows as closed then).",
    )
    add_db_arg(parser)
    parser.add_argument("--open", action="store_true", help="only incidents still open")
    parser.add_argument(
        "--limit",
        type=positive_int,
        default=DEFAULT_LIMIT,
        help=f"at most this many incidents, >= 1 (default {DEFAULT_LIMIT})",
    )
    parser.add_argument("--json", action="store_true", help=JSON_HELP + ", one per incident")


def run_incidents(args: argparse.Namespace) -> int:
    from streams.audit.incidents import has_incident_table, list_incidents

    now_ms = int(time.time() * 1000)
    with read_trail(args.db) as store:
        migrated = has_incident_table(store)
        found = (
            list_incidents(store, open_only=args.open, limit=args.limit + 1, now_ms=now_ms)
            if migrated
            else []
        )
    if not migrated:
        print(
            "loopguard incidents: the audit trail predates incidents (`loopguard migrate` "
            "adds them)",
            file=sys.stderr,
        )
    cut = len(found) > args.limit
    found = found[: args.limit]
    notice = f"showing the newest {args.limit} incidents; more match (--limit N shows more)"
    if args.json:
        for incident in found:
            print(json.dumps({**incident.to_dict(), "label": incident.label}, ensure_ascii=False))
        if cut:
            print(f"loopguard incidents: {notice}", file=sys.stderr)
        return EXIT_OK
    if not found:
        print("no open incidents" if args.open else "no incidents")
        return EXIT_OK
    rows = [
        [
            format_ms(i.opened_at),
            i.incident_id,
            i.status,
            i.tool,
            str(len(i.runs)),
            str(len(i.agents)),
            format_ms(i.closed_at) if i.closed_at is not None else "-",
            i.label,
        ]
        for i in found
    ]
    for line in table(COLUMNS, rows):
        print(line)
    if cut:
        print(notice)
    return EXIT_OK
