"""Checks a worker runs before it starts guarding, each failing in one line within seconds.

A worker whose topics were created by someone else with other partition counts would keep a
run's state on a different partition than its events (Faust's tables rely on co-partitioning)
and stop guarding in ways no log line explains, so it refuses to start instead. The audit
database is only checked for a usable URL: an outage at start is reported, not fatal, because
decisions keep flowing to gateways and the audit rows wait in the control topic.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from sqlalchemy import text
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from streams.audit.engines import create_audit_engine
from streams.kafka.topics import ensure_topics, partition_counts, topic_specs
from streams.settings import Settings, redact_url
from streams.worker.faust_layer import PATCHED_AIOKAFKA, PATCHED_VERSION, mismatches

log = logging.getLogger("loopguard.worker")

BROKER_TIMEOUT = 3.0  # a reachable broker answers in milliseconds; the 5 s budget includes start-up


@contextlib.contextmanager
def quiet(logger_name: str) -> Iterator[None]:
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


class StartupError(RuntimeError):
    """A reason not to start, phrased for the operator (one line, names what to check)."""


def check_faust_patches() -> None:
    """Refuse a Faust the patches of :mod:`faust_layer` were not written for."""
    problems = mismatches()
    if problems:
        raise StartupError(
            f"{'; '.join(problems)}: loopguard patches faust-streaming {PATCHED_VERSION}'s "
            f"consumer and recovery and aiokafka {PATCHED_AIOKAFKA}'s transactional sender; "
            f"install faust-streaming=={PATCHED_VERSION} aiokafka=={PATCHED_AIOKAFKA}"
        )


def co_partitioned(settings: Settings) -> set[str]:
    """Topics that must have as many partitions as the events topic."""
    return {
        settings.topics.events,
        settings.topics.control,
        settings.topics.deadletter,
        f"{settings.app_id}-runs-changelog",
        f"{settings.app_id}-sessions-changelog",
    }


def prepare_topics(settings: Settings, timeout: float = BROKER_TIMEOUT) -> list[str]:
    """Create missing topics, then verify the partition counts of all of them."""
    names = [spec.name for spec in topic_specs(settings)]
    try:
        with quiet("kafka"):  # the one-line reason below says it all
            created = ensure_topics(settings, timeout=timeout)
            counts = partition_counts(settings, names, timeout=timeout)
    except RuntimeError as exc:
        raise StartupError(
            f"{exc} (check --broker / LOOPGUARD_BROKER and that Kafka is running there)"
        ) from None
    events = counts.get(settings.topics.events)
    for name in sorted(co_partitioned(settings)):
        if counts.get(name) != events:
            raise StartupError(
                f"topic {name} has {counts.get(name)} partitions but {settings.topics.events} "
                f"has {events}: a run's state, decisions and events must share a partition "
                "number; recreate the topic with the same count or use another --topic-prefix"
                " / --app-id"
            )
    return created


def check_database_url(settings: Settings) -> str:
    """Refuse an unusable URL; report (not refuse) a database that does not answer yet.

    Returns "ok" or the reason the database is degraded, for the health view and the log.
    """
    shown = redact_url(settings.db_url)
    timeout = {"connect_timeout": int(BROKER_TIMEOUT)}
    try:
        postgres = settings.db_url.startswith("postgresql")
        engine = create_audit_engine(settings.db_url, connect_args=timeout if postgres else {})
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise StartupError(
            f"--db {shown} is not a usable database URL ({exc}); "
            "use sqlite:///path.db or postgresql+psycopg://user@host/db"
        ) from None
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return "ok"
    except SQLAlchemyError as exc:
        reason = str(exc).splitlines()[0][:200]
        log.warning(
            "audit database %s unreachable at start (%s); decisions keep flowing, audit rows "
            "wait in the control topic until it answers",
            shown,
            reason,
        )
        return f"unreachable: {reason}"
    finally:
        engine.dispose()
