"""What every ``loopguard`` subcommand shares: exit codes, the broker/topic/database flags, the
settings those flags make, and the one-line error reporting of commands that talk to Kafka.

The bottom of the CLI layer: every other CLI module may import it; it imports none of them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace

from streams.settings import DEFAULT_DB_URL, Settings, Topics

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DIVERGED = 0, 1, 2, 3


class InputError(Exception):
    """Bad flags or a bad input file; reported in one line, exit code 2."""


def add_topic_args(parser: argparse.ArgumentParser) -> None:
    """``--broker`` and ``--topic-prefix``, defaulting to the workers' environment variables."""
    parser.add_argument(
        "--broker",
        default=os.environ.get("LOOPGUARD_BROKER", "kafka://127.0.0.1:9092"),
        help="Kafka bootstrap URL, e.g. kafka://host:9092 (env LOOPGUARD_BROKER); security "
        "options come from LOOPGUARD_SECURITY_PROTOCOL, LOOPGUARD_SASL_* as for workers",
    )
    parser.add_argument(
        "--topic-prefix",
        metavar="PREFIX",
        default=os.environ.get("LOOPGUARD_TOPIC_PREFIX", "loopguard"),
        help="topic name prefix: topics are PREFIX.events, PREFIX.control, PREFIX.config, ... "
        "(env LOOPGUARD_TOPIC_PREFIX; default loopguard)",
    )


def add_db_arg(parser: argparse.ArgumentParser) -> None:
    """``--db``: the audit trail's SQLAlchemy URL."""
    parser.add_argument(
        "--db",
        default=os.environ.get("LOOPGUARD_DB_URL", DEFAULT_DB_URL),
        help=f"SQLAlchemy URL of the audit trail (env LOOPGUARD_DB_URL; default {DEFAULT_DB_URL})",
    )


COMMAND_BOOTSTRAP_TIMEOUT_MS = 3_000


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The environment's settings with ``--broker`` and ``--topic-prefix`` applied; Kafka
    clients give up on an unreachable broker after 3 s (the command then says so)."""
    return replace(
        Settings.from_env(),
        broker=args.broker,
        topics=Topics.with_prefix(args.topic_prefix),
        bootstrap_timeout_ms=COMMAND_BOOTSTRAP_TIMEOUT_MS,
    )


def quiet_kafka() -> None:
    """Commands that report broker trouble themselves, in one line: no client log spam."""
    logging.getLogger("kafka").setLevel(logging.CRITICAL)


def run_reporting_errors(
    command: str,
    work: Callable[[argparse.Namespace], int],
    args: argparse.Namespace,
    usage_errors: tuple[type[Exception], ...] = (),
) -> int:
    """Run a subcommand that talks to Kafka; bad input (:class:`InputError` and
    ``usage_errors``) and broker trouble end it with one line on stderr, not a traceback."""
    # Deferred: kafka-python takes most of a second to import, and `history`/`runs` never need it.
    from kafka.errors import KafkaError

    from streams.kafka.reader import ReaderError

    quiet_kafka()
    try:
        return work(args)
    except (InputError, *usage_errors) as exc:
        print(f"loopguard {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ReaderError as exc:
        print(f"loopguard {command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KafkaError as exc:
        print(
            f"loopguard {command}: broker {args.broker}: {exc} (check --broker / "
            "LOOPGUARD_BROKER and that Kafka is running there)",
            file=sys.stderr,
        )
        return EXIT_ERROR
