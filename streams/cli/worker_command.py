"""``loopguard worker``: its flags, the checks that fail in one line before Faust starts, and the
start itself.

Before Faust is involved the command refuses, each in one line naming the flag that fixes it:
an invalid config (checked before anything touches the broker), an unusable database URL, a
web port that is taken, a broker that refuses the transactions the profile needs (tansu under
the kafka profile), an events topic with another partition count than ``--partitions`` says.
The audit schema is migrated here too, so a fresh worker's status page shows a working
database before its first decision.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import replace
from typing import Any

from streams.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, add_db_arg, add_topic_args
from streams.settings import Settings, Topics

log = logging.getLogger("loopguard.worker")


def add_worker_parser(sub: Any) -> argparse.ArgumentParser:
    worker = sub.add_parser(
        "worker",
        help="run a stream worker (scale out by starting more with the same --app-id)",
        description="Run a Faust worker: consumes the events topic, keeps per-run state, "
        "publishes decisions to the control topic and writes the audit trail. Agents whose "
        'config says mode: "observe" get decisions marked enforced=false (gateways only log '
        "them); those are recorded but never posted to webhooks (LOOPGUARD_WEBHOOK_URL, "
        "LOOPGUARD_WEBHOOK_URLS). Before starting it checks the database URL, the web port, "
        "that the broker fits --broker-profile and the topics' partition counts, and "
        "migrates the audit schema; each failure is one line on stderr, exit code 1.",
    )
    add_topic_args(worker)
    add_db_arg(worker)
    worker.add_argument(
        "--config", metavar="FILE", help="tools.loopDetection config file (JSON5, JSON, YAML)"
    )
    worker.add_argument(
        "--app-id",
        default=os.environ.get("LOOPGUARD_APP_ID", "loopguard"),
        help="Faust app id = consumer group; workers with the same id share the work "
        "(env LOOPGUARD_APP_ID; default loopguard)",
    )
    worker.add_argument(
        "--role",
        choices=["all", "guard", "audit"],
        default=os.environ.get("LOOPGUARD_ROLE", "all"),
        help="what this process runs: all (the guarding agent, the audit trail and the web "
        "pages in one process), guard (only the guarding agent and its tables, with "
        "/healthz and /metrics; no database) or audit (the audit trail, incidents, loops "
        "between agents, config audit and the web pages, in the consumer group "
        "<app id>-audit); run one guard and one audit process per app id instead of all "
        "(env LOOPGUARD_ROLE; default all)",
    )
    worker.add_argument(
        "--broker-profile",
        choices=["kafka", "tansu"],
        default=os.environ.get("LOOPGUARD_BROKER_PROFILE", "kafka"),
        help="what the broker can do: kafka (replication 3, min.insync.replicas 2, "
        "exactly once, batching) or tansu (the embedded broker of `loopguard demo`: one "
        "node, at least once, one record per batch) (env LOOPGUARD_BROKER_PROFILE; "
        "default kafka)",
    )
    worker.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="partitions of the topics it creates (env LOOPGUARD_PARTITIONS; default: the "
        "events topic's count when it exists, else 8); must match an existing events topic",
    )
    worker.add_argument(
        "--web-port",
        type=int,
        metavar="PORT",
        help="serve the status page (/status), the HTTP API and /metrics on this port",
    )
    worker.add_argument(
        "--data-dir", metavar="DIR", help="worker data directory (default ./loopguard-data)"
    )
    worker.add_argument("-l", "--loglevel", default="info", help="log level (default info)")
    return worker


def worker_settings(args: argparse.Namespace, partitions: int | None = None) -> Settings:
    """The worker's settings: the ``LOOPGUARD_*`` variables on the ``--broker-profile``'s
    defaults, with the flags on top; one source of defaults, no round trip through the
    environment. ``partitions`` is the count adopted from existing topics."""
    settings = Settings.from_env(args.broker_profile)
    flags: dict[str, Any] = {
        "broker": args.broker,
        "db_url": args.db,
        "app_id": args.app_id,
        "role": args.role,
        "topics": Topics.with_prefix(args.topic_prefix),
    }
    if args.config:
        flags["config_file"] = args.config
    if partitions or args.partitions:
        flags["partitions"] = partitions or args.partitions
    if args.web_port:
        flags.update(web_enabled=True, web_port=args.web_port)
    if args.data_dir:
        flags["data_dir"] = args.data_dir
    return replace(settings, **flags)


def _migrate_at_start(db_url: str, reachable: bool) -> None:
    """Create or upgrade the audit schema now rather than at the first decision; a database
    that is down is the audit writer's to wait for (it migrates before its first write)."""
    from streams.audit.database import migrate
    from streams.settings import redact_url

    if not reachable:
        return
    try:
        migrate(db_url)
    except Exception as exc:  # noqa: BLE001 - the writer retries; the worker still guards
        log.warning("audit schema not migrated at start (%s): %s", redact_url(db_url), exc)


def run_worker(args: argparse.Namespace) -> int:
    explicit_partitions = bool(args.partitions) or "LOOPGUARD_PARTITIONS" in os.environ
    from streams.cli.broker_checks import partitions_mismatch, profile_mismatch
    from streams.core.config import ConfigError
    from streams.core.fleet import load_fleet_config
    from streams.devtools.embedded_broker import port_in_use
    from streams.worker.bootstrap import build_worker
    from streams.worker.startup import StartupError, check_database_url, prepare_topics

    try:
        settings = worker_settings(args)
    except ValueError as exc:  # a LOOPGUARD_* variable that is not a value it takes
        print(f"loopguard worker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        # The config first: a mistake in it is refused before anything touches the broker
        # (no topic is created for a worker that would not start).
        load_fleet_config(settings.config_file)
        # A guard never touches the database: the audit role writes the trail.
        database = check_database_url(settings) if settings.audits else "not used"
        if settings.web_enabled and port_in_use(settings.web_bind, settings.web_port):
            raise StartupError(
                f"--web-port {settings.web_port}: {settings.web_bind}:{settings.web_port} is "
                "already in use (another worker or demo?); choose another port"
            )
        mismatch = profile_mismatch(settings)
        if mismatch is not None:
            raise StartupError(mismatch)
        adopted, error = partitions_mismatch(settings, explicit_partitions)
        if error is not None:
            raise StartupError(error)
        if adopted is not None:
            log.info("using the events topic's %d partitions (--partitions not given)", adopted)
            settings = worker_settings(args, partitions=adopted)
        prepare_topics(settings)
        _migrate_at_start(settings.db_url, reachable=database == "ok")
        app = build_worker(settings)
    except ConfigError as exc:
        print(f"loopguard worker: invalid config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StartupError as exc:
        print(f"loopguard worker: {exc}", file=sys.stderr)
        return EXIT_ERROR
    # SIGTERM/SIGINT end it within LOOPGUARD_SHUTDOWN_TIMEOUT (the app's Worker, bootstrap).
    sys.argv = ["loopguard", "worker", "-l", args.loglevel]
    if args.web_port:
        sys.argv += ["--web-port", str(args.web_port), "--web-bind", settings.web_bind]
    else:
        sys.argv.append("--without-web")
    app.main()
    return EXIT_OK
