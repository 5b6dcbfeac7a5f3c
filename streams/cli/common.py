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
from pathlib import Path
from typing import TYPE_CHECKING

from streams.settings import DEFAULT_DB_URL, Settings, Topics, redact_urls

if TYPE_CHECKING:  # deferred at run time (SQLAlchemy)
    from streams.audit.store import AuditStore

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
            f"loopguard {command}: broker {redact_urls(args.broker)}: {exc} (check --broker / "
            "LOOPGUARD_BROKER and that Kafka is running there)",
            file=sys.stderr,
        )
        return EXIT_ERROR


class TrailError(RuntimeError):
    """The audit trail cannot be read; the message says what to do."""


def missing_sqlite_file(url: str) -> str | None:
    """The file of an SQLite ``url`` when that file does not exist (nothing was ever recorded
    there), else None (another backend, an in-memory database, an existing file, no URL)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    database = parsed.database or ""
    is_file = parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:")
    return database if is_file and not Path(database).exists() else None


def read_trail(url: str) -> AuditStore:
    """The audit trail for a read-only command: never creates a file or a folder, and says
    in one line when there is no trail, no schema yet, or no database answering."""
    # Deferred, as in every query command: SQLAlchemy is not loaded for the other commands.
    from sqlalchemy import inspect
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from streams.audit.store import AuditStore
    from streams.settings import redact_url

    shown = redact_url(url)
    try:
        make_url(url)
    except ArgumentError:
        raise TrailError(f"--db {shown} is not a database URL") from None
    missing = missing_sqlite_file(url)
    if missing is not None:
        raise TrailError(
            f"no audit trail at {missing} (workers write it with --db {shown}; "
            f"`loopguard migrate --db {shown}` creates an empty one)"
        )
    options = {"connect_args": {"connect_timeout": 5}} if shown.startswith("postgresql") else {}
    store = AuditStore(url, **options)
    try:
        ready = inspect(store.engine).has_table("decisions")
    except SQLAlchemyError as exc:
        store.close()
        first = str(exc).splitlines()[0][:200]
        raise TrailError(f"cannot reach the audit database {shown}: {first}") from None
    if not ready:
        store.close()
        raise TrailError(
            f"the audit trail at {shown} has no schema yet: run `loopguard migrate --db {shown}`"
        )
    return store
