"""``loopguard`` command line: run workers, the embedded demo, and query the audit trail.

Every command prints errors as one line on stderr (``loopguard COMMAND: ...``), never a
traceback (LOOPGUARD_DEBUG=1 shows one); ``--json`` output is JSON lines everywhere (one JSON
object per line: a record per line for lists and streams, one line for a report). docs/cli.md
describes every command.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Sequence
from importlib import metadata

from streams.cli.backtest_commands import add_backtest_parser, run_backtest
from streams.cli.common import EXIT_ERROR, TrailError, add_db_arg
from streams.cli.config_commands import add_config_parser, run_config
from streams.cli.demo_command import add_demo_parser, run_demo
from streams.cli.doctor_command import add_doctor_parser, run_doctor
from streams.cli.import_command import add_import_parser, run_import
from streams.cli.incidents_command import add_incidents_parser, run_incidents
from streams.cli.quality_command import add_quality_parser, run_quality
from streams.cli.query_commands import add_query_parsers, run_history, run_migrate, run_runs
from streams.cli.release_command import add_release_parsers, run_release
from streams.cli.replay_commands import (
    add_export_parser,
    add_replay_parser,
    run_export,
    run_replay,
)
from streams.cli.tail_command import add_tail_parser, run_tail
from streams.cli.worker_command import add_worker_parser, run_worker


def version() -> str:
    """The installed distribution's version (``pip show loopguard``)."""
    try:
        return metadata.version("loopguard")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class CommandParser(argparse.ArgumentParser):
    """A parser whose subcommands refuse an unknown flag themselves, with their own usage
    (``loopguard tail --nope`` prints ``tail``'s usage, not the top-level one): argparse hands
    a subcommand's leftovers up to the top-level parser, which knows nothing of its flags."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self.prog != PROG:  # a subcommand's parser: say it with its usage
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


PROG = "loopguard"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description=(
            "Distributed loop guard for AI agent fleets: watches tool calls and compactions "
            "on Kafka, tells gateways to warn, block or abort, and keeps an SQL audit trail. "
            "Start with `loopguard demo`; `loopguard COMMAND --help` explains each command."
        ),
    )
    parser.add_argument(
        "--version", action="version", version=f"loopguard {version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_worker_parser(sub)
    add_demo_parser(sub)
    add_query_parsers(sub)
    add_incidents_parser(sub)
    add_quality_parser(sub)
    add_tail_parser(sub)
    add_doctor_parser(sub)
    add_db_arg(add_replay_parser(sub))
    add_backtest_parser(sub)
    add_export_parser(sub)
    add_import_parser(sub)
    add_config_parser(sub)
    add_release_parsers(sub)
    return parser


EXIT_BROKEN_PIPE = 141  # as a shell reports a process ended by SIGPIPE
# Commands whose INFO lines are what the operator watches; the others print only warnings.
LOGGING_COMMANDS = ("worker", "demo")


COMMANDS = {
    "replay": run_replay,
    "backtest": run_backtest,
    "export": run_export,
    "import": run_import,
    "config": run_config,
    "worker": run_worker,
    "demo": run_demo,
    "history": run_history,
    "tail": run_tail,
    "doctor": run_doctor,
    "runs": run_runs,
    "incidents": run_incidents,
    "quality": run_quality,
    "migrate": run_migrate,
    "release": run_release,
    "abort": run_release,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # `kill -USR1 PID`: every thread's stack on stderr, for a stuck command (not where stderr
    # is no file, e.g. captured in a test).
    with contextlib.suppress(AttributeError, OSError, ValueError):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    level = logging.INFO if args.command in LOGGING_COMMANDS else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(message)s")
    # Kafka clients are chatty at INFO; LOOPGUARD_CLIENT_LOGLEVEL=info brings them back.
    client_level = os.environ.get("LOOPGUARD_CLIENT_LOGLEVEL", "warning").upper()
    if client_level not in logging.getLevelNamesMapping():
        print(
            f"loopguard {args.command}: error: LOOPGUARD_CLIENT_LOGLEVEL={client_level.lower()!r}"
            " is not a log level (debug, info, warning, error, critical)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    for noisy in ("kafka", "aiokafka"):
        logging.getLogger(noisy).setLevel(client_level)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `loopguard history RUN | head -1`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return EXIT_BROKEN_PIPE
    except TrailError as exc:
        print(f"loopguard {args.command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # a clear one-line error for operators, never a traceback
        if os.environ.get("LOOPGUARD_DEBUG"):
            raise
        print(f"loopguard {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
