"""``loopguard demo``: its flags; the demo itself is :mod:`streams.devtools.demo`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from streams.settings import DEFAULT_DB_URL


def add_demo_parser(sub: Any) -> argparse.ArgumentParser:
    demo = sub.add_parser(
        "demo",
        help="start broker + SQLite + worker + a demo gateway and show loops being caught",
        description="Runs the embedded default end to end: the tansu broker, a SQLite audit "
        "trail, one worker and a demo gateway that plays six agent runs: ordinary work (no "
        "loop), a ping-pong loop (warned, blocked, aborted), a loop that survives a "
        "context-overflow compaction, different calls all failing (consecutive_errors), the "
        "same call failing alike (error_repeat) and compaction after compaction "
        "(compaction_storm). Prints each run's decisions, then a summary that checks them "
        "against the detector core and the audit trail (exit code 0 when all agree). "
        "Everything it starts stops when it ends, on Ctrl-C too, unless --keep-running. "
        "Logs: loopguard-data/worker.log and tansu.log, rewritten on every run.",
    )
    demo.add_argument(
        "--db", default=DEFAULT_DB_URL, help=f"audit trail URL (default {DEFAULT_DB_URL})"
    )
    demo.add_argument(
        "--keep-running",
        action="store_true",
        help="leave the broker and the worker up at the end, the worker serving the status "
        "page; prints its URL, the `export LOOPGUARD_BROKER=...` line that points the other "
        "commands at the broker, and the command that stops both (loopguard demo --stop)",
    )
    demo.add_argument(
        "--web-port",
        type=int,
        metavar="PORT",
        help="with --keep-running: the status page's port (default 6066, or a free port "
        "when 6066 is taken)",
    )
    demo.add_argument(
        "--stop",
        action="store_true",
        help="stop what `loopguard demo --keep-running` left running from this folder (its "
        "pids are in loopguard-data/demo.pid) and exit",
    )
    return demo


def run_demo(args: argparse.Namespace) -> int:
    # Deferred: the demo pulls in the broker, the worker process and the gateway client.
    if args.stop:
        from streams.devtools.demo_services import stop_left_running

        code, line = stop_left_running()
        print(
            line if code == 0 else f"loopguard demo: {line}",
            file=sys.stdout if code == 0 else sys.stderr,
        )
        return code
    if args.web_port is not None and not args.keep_running:
        print("loopguard demo: --web-port needs --keep-running", file=sys.stderr)
        return 2
    from streams.devtools.demo import run_demo as demo

    return demo(db_url=args.db, keep_running=args.keep_running, web_port=args.web_port)
