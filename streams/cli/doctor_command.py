"""``loopguard doctor``: every check an operator would otherwise run by hand, one line each.

Broker reachable, the broker profile fits the broker (transactions for exactly once), topics
present and co-partitioned, the audit database reachable and migrated, the config file valid,
and the worker group's lag on the events topic. A check that cannot run because an earlier
one failed says ``skip``; any ``FAIL`` makes the exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streams.cli.common import EXIT_ERROR, EXIT_OK, add_db_arg, add_topic_args, settings_from_args
from streams.settings import redact_urls

OK, FAIL, SKIP = "ok", "FAIL", "skip"
CHECK_TIMEOUT = 3.0  # seconds per broker or database call


@dataclass(frozen=True)
class Check:
    name: str
    state: str  # ok | FAIL | skip
    detail: str

    def line(self) -> str:
        return f"{self.state:<4}  {self.name:<9} {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.name,
            "state": self.state,
            "ok": self.state == OK,
            "detail": self.detail,
        }


def add_doctor_parser(sub: Any) -> argparse.ArgumentParser:
    doctor = sub.add_parser(
        "doctor",
        help="check broker, profile, topics, database, config and the workers' lag",
        description="Run every check a deployment needs, one line each (ok, FAIL, or skip "
        "when an earlier check failed): broker reachable; --broker-profile fits the broker "
        "(the kafka profile's exactly once needs transactions); topics present with "
        "co-partitioned partition counts; audit database reachable and migrated; config "
        "file valid; the worker group's (--app-id) lag on the events topic. Exit code 0 "
        "when nothing failed, 1 otherwise. Flags and variables as for `loopguard worker`.",
    )
    add_topic_args(doctor)
    add_db_arg(doctor)
    doctor.add_argument(
        "--config",
        default=os.environ.get("LOOPGUARD_CONFIG") or None,
        metavar="FILE",
        help="the workers' config file to validate (env LOOPGUARD_CONFIG; default: none, "
        "the built-in defaults)",
    )
    doctor.add_argument(
        "--app-id",
        default=os.environ.get("LOOPGUARD_APP_ID", "loopguard"),
        help="the workers' app id = consumer group (env LOOPGUARD_APP_ID; default loopguard)",
    )
    doctor.add_argument(
        "--broker-profile",
        choices=["kafka", "tansu"],
        default=os.environ.get("LOOPGUARD_BROKER_PROFILE", "kafka"),
        help="the workers' broker profile (env LOOPGUARD_BROKER_PROFILE; default kafka)",
    )
    doctor.add_argument(
        "--json", action="store_true", help="print JSON lines: one object per check"
    )
    return doctor


def _settings(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from streams.settings import PROFILES

    profile = PROFILES[args.broker_profile]
    return replace(
        settings_from_args(args),
        app_id=args.app_id,
        db_url=args.db,
        profile=profile.name,
        processing_guarantee=os.environ.get(
            "LOOPGUARD_PROCESSING_GUARANTEE", profile.processing_guarantee
        ),
    )


def check_broker(settings: Any) -> tuple[Check, list[str] | None]:
    from kafka.errors import KafkaError

    from streams.kafka.topics import admin_client
    from streams.worker.startup import quiet

    try:
        with quiet("kafka"):
            admin = admin_client(settings, CHECK_TIMEOUT)
            try:
                topics = sorted(admin.list_topics())
            finally:
                admin.close()
    except (KafkaError, OSError) as exc:
        return Check("broker", FAIL, f"{redact_urls(settings.broker)} does not answer: {exc}"), None
    shown = redact_urls(settings.broker)
    return Check("broker", OK, f"{shown} answers ({len(topics)} topics)"), topics


def check_profile(settings: Any) -> Check:
    from streams.cli.broker_checks import profile_mismatch

    if settings.processing_guarantee != "exactly_once":
        return Check("profile", OK, f"{settings.profile}: at least once, needs no transactions")
    mismatch = profile_mismatch(settings)
    if mismatch is not None:
        return Check("profile", FAIL, mismatch)
    return Check("profile", OK, f"{settings.profile}: the broker accepts transactions")


def check_topics(settings: Any, existing: list[str]) -> Check:
    from streams.kafka.topics import partition_counts, topic_specs
    from streams.worker.startup import co_partitioned, quiet

    names = [spec.name for spec in topic_specs(settings)]
    missing = [n for n in names if n not in existing]
    if missing:
        return Check(
            "topics", FAIL, f"missing {', '.join(missing)} (a worker creates them at start)"
        )
    with quiet("kafka"):
        counts = partition_counts(settings, names, timeout=CHECK_TIMEOUT)
    events = counts.get(settings.topics.events)
    odd = sorted(n for n in co_partitioned(settings) if counts.get(n) != events)
    if odd:
        shown = ", ".join(f"{n} has {counts.get(n)}" for n in odd)
        return Check(
            "topics", FAIL, f"{settings.topics.events} has {events} partitions but {shown}"
        )
    return Check("topics", OK, f"{len(names)} topics; {events} partitions, co-partitioned")


def check_database(url: str) -> Check:
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

    from streams.audit.database import schema_revisions
    from streams.cli.common import missing_sqlite_file
    from streams.settings import redact_url

    shown = redact_url(url)
    missing = missing_sqlite_file(url)
    if missing is not None:
        return Check(
            "database", FAIL, f"no audit trail at {missing} (`loopguard migrate --db {shown}`)"
        )
    options = (
        {"connect_args": {"connect_timeout": int(CHECK_TIMEOUT)}} if "postgresql" in url else {}
    )
    try:
        current, head = schema_revisions(url, **options)
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        return Check("database", FAIL, f"--db {shown} is not a usable database URL ({exc})")
    except SQLAlchemyError as exc:
        return Check("database", FAIL, f"{shown} does not answer: {str(exc).splitlines()[0][:200]}")
    if current != head:
        return Check(
            "database",
            FAIL,
            f"{shown} is at schema {current or 'none'}, not {head}: "
            f"run `loopguard migrate --db {shown}` (workers migrate at start)",
        )
    return Check("database", OK, f"{shown} answers, schema at head ({head})")


def check_config(path: str | None) -> Check:
    from streams.core.config import ConfigError
    from streams.core.fleet import load_fleet_config

    if not path:
        return Check("config", OK, "no --config: the built-in defaults (loop detection off)")
    try:
        load_fleet_config(path)
    except ConfigError as exc:
        return Check("config", FAIL, f"{path}: {exc}")
    return Check("config", OK, f"{path} is valid")


def check_lag(settings: Any) -> Check:
    from kafka import KafkaConsumer, TopicPartition

    from streams.kafka.topics import admin_client
    from streams.worker.startup import quiet

    topic, group = settings.topics.events, settings.app_id
    with quiet("kafka"):
        admin = admin_client(settings, CHECK_TIMEOUT)
        try:
            committed = admin.list_group_offsets(group).get(group, {})
        finally:
            admin.close()
        consumer = KafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            **settings.kafka_client_options(),
        )
        try:
            partitions = consumer.partitions_for_topic(topic) or set()
            ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        finally:
            consumer.close()
    if not any(ends.values()):
        return Check("lag", OK, f"no events on {topic} yet")
    done = {tp: meta.offset for tp, meta in committed.items() if tp.topic == topic}
    if not done:
        return Check(
            "lag",
            FAIL,
            f"group {group} has committed nothing on {topic}: no worker with --app-id "
            f"{group} has processed its events",
        )
    lag = sum(max(end - done.get(tp, 0), 0) for tp, end in ends.items())
    return Check("lag", OK, f"group {group} is {lag} events behind on {topic}")


def _guarded(name: str, check: Callable[[], Check]) -> Check:
    """A check that raises is a FAIL with its reason, never a traceback."""
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - one line per check, whatever went wrong
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        return Check(name, FAIL, f"{type(exc).__name__}: {first}")


def run_doctor(args: argparse.Namespace) -> int:
    settings = _settings(args)
    checks: list[Check] = []

    def report(check: Check) -> None:
        checks.append(check)
        if args.json:
            print(json.dumps(check.to_dict(), ensure_ascii=False), flush=True)
        else:
            print(check.line(), flush=True)

    broker, topics = check_broker(settings)
    report(broker)
    if topics is None:
        for name in ("profile", "topics"):
            report(Check(name, SKIP, "the broker does not answer"))
    else:
        report(_guarded("profile", lambda: check_profile(settings)))
        report(_guarded("topics", lambda: check_topics(settings, topics)))
    report(_guarded("database", lambda: check_database(args.db)))
    report(_guarded("config", lambda: check_config(args.config)))
    if topics is None:
        report(Check("lag", SKIP, "the broker does not answer"))
    else:
        report(_guarded("lag", lambda: check_lag(settings)))
    failed = [c.name for c in checks if c.state == FAIL]
    if failed and not args.json:
        print(
            f"loopguard doctor: {len(failed)} check(s) failed: {', '.join(failed)}", file=sys.stderr
        )
    return EXIT_ERROR if failed else EXIT_OK
