"""``loopguard`` command line: run workers, the embedded demo, and query the audit trail."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from streams.audit.observed import OBSERVE_ONLY, OBSERVED_ABORT
from streams.cli.backtest_commands import add_backtest_parser, run_backtest
from streams.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    TrailError,
    add_db_arg,
    add_topic_args,
    read_trail,
)
from streams.cli.config_commands import add_config_parser, run_config
from streams.cli.replay_commands import (
    add_export_parser,
    add_replay_parser,
    run_export,
    run_replay,
)
from streams.settings import DEFAULT_DB_URL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopguard",
        description=(
            "Distributed loop guard for AI agent fleets: watches tool calls and compactions "
            "on Kafka, tells gateways to warn, block or abort, and keeps an SQL audit trail."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    worker = sub.add_parser(
        "worker",
        help="run a stream worker (scale out by starting more with the same --app-id)",
        description="Run a Faust worker: consumes the events topic, keeps per-run state, "
        "publishes decisions to the control topic and writes the audit trail. Agents whose "
        'config says mode: "observe" get decisions marked enforced=false (gateways only log '
        "them); those are recorded but never posted to webhooks (LOOPGUARD_WEBHOOK_URL, "
        "LOOPGUARD_WEBHOOK_URLS).",
    )
    add_topic_args(worker)
    add_db_arg(worker)
    worker.add_argument("--config", help="tools.loopDetection config file (JSON5, JSON, YAML)")
    worker.add_argument(
        "--app-id",
        default=os.environ.get("LOOPGUARD_APP_ID", "loopguard"),
        help="Faust app id = consumer group; workers with the same id share the work "
        "(env LOOPGUARD_APP_ID; default loopguard)",
    )
    worker.add_argument(
        "--broker-profile",
        choices=["kafka", "tansu"],
        default=os.environ.get("LOOPGUARD_BROKER_PROFILE", "kafka"),
        help="what the broker can do: kafka (replication 3, min.insync.replicas 2, "
        "exactly once, batching) or tansu (the embedded broker: one node, at least once, "
        "one record per batch) (env LOOPGUARD_BROKER_PROFILE; default kafka)",
    )
    worker.add_argument("--partitions", type=int, help="partitions of topics it creates")
    worker.add_argument("--web-port", type=int, help="serve the HTTP API on this port")
    worker.add_argument("--data-dir", help="worker data directory (default ./loopguard-data)")
    worker.add_argument("-l", "--loglevel", default="info", help="log level (default info)")

    demo = sub.add_parser(
        "demo",
        help="start broker + SQLite + worker + a demo gateway and show loops being caught",
        description="Runs the embedded default end to end: the tansu broker, a SQLite audit "
        "trail, one worker and a demo gateway replaying an agent session with a ping-pong "
        "loop and a post-compaction loop. Prints decisions as they arrive.",
    )
    demo.add_argument("--db", default=DEFAULT_DB_URL, help="audit trail URL")
    demo.add_argument("--keep-running", action="store_true", help="leave services up at the end")

    history = sub.add_parser(
        "history",
        help="loop history of one run from the audit trail",
        description="One run's decisions in order; observe-only ones (mode: observe) are "
        f"marked [{OBSERVE_ONLY}] (JSON: enforced false).",
    )
    history.add_argument("run_id", help="the run id (the events' message key)")
    add_db_arg(history)
    history.add_argument("--json", action="store_true", help="print JSON lines")

    runs = sub.add_parser(
        "runs",
        help="runs with loop decisions, newest first",
        description="One line per run: decisions by action, observed = how many were "
        f"observe-only (mode: observe); worst action '({OBSERVE_ONLY})' when none at it was "
        f"enforced, status '{OBSERVED_ABORT}' for a run whose abort was never enforced.",
    )
    add_db_arg(runs)
    runs.add_argument("--agent", help="only decisions of this agent id")
    runs.add_argument("--gateway", help="only decisions of this gateway id")
    runs.add_argument("--detector", help="only decisions of this detector, e.g. ping_pong")
    runs.add_argument("--severity", choices=["warning", "critical"], help="only this severity")
    runs.add_argument("--since", type=int, help="epoch ms, inclusive")
    runs.add_argument("--until", type=int, help="epoch ms, exclusive")
    runs.add_argument("--limit", type=int, default=50, help="at most this many runs (default 50)")
    runs.add_argument("--json", action="store_true", help="print JSON")

    migrate = sub.add_parser("migrate", help="create or upgrade the audit schema (Alembic)")
    add_db_arg(migrate)

    add_db_arg(add_replay_parser(sub))
    add_backtest_parser(sub)
    add_export_parser(sub)
    add_config_parser(sub)
    return parser


def run_worker(args: argparse.Namespace) -> int:
    env = {
        "LOOPGUARD_BROKER": args.broker,
        "LOOPGUARD_DB_URL": args.db,
        "LOOPGUARD_APP_ID": args.app_id,
        "LOOPGUARD_TOPIC_PREFIX": args.topic_prefix,
        "LOOPGUARD_BROKER_PROFILE": args.broker_profile,
    }
    if args.config:
        env["LOOPGUARD_CONFIG"] = args.config
    if args.partitions:
        env["LOOPGUARD_PARTITIONS"] = str(args.partitions)
    if args.web_port:
        env["LOOPGUARD_WEB"] = "1"
        env["LOOPGUARD_WEB_PORT"] = str(args.web_port)
    if args.data_dir:
        env["LOOPGUARD_DATA_DIR"] = args.data_dir
    os.environ.update(env)
    from streams.core.config import ConfigError
    from streams.settings import Settings
    from streams.worker.bootstrap import build_worker
    from streams.worker.startup import StartupError, check_database_url, prepare_topics

    settings = Settings.from_env()
    try:
        check_database_url(settings)
        prepare_topics(settings)
        app = build_worker(settings)
    except ConfigError as exc:
        print(f"loopguard worker: invalid config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StartupError as exc:
        print(f"loopguard worker: {exc}", file=sys.stderr)
        return EXIT_ERROR
    sys.argv = ["loopguard", "worker", "-l", args.loglevel]
    if args.web_port:
        sys.argv += ["--web-port", str(args.web_port), "--web-bind", settings.web_bind]
    else:
        sys.argv.append("--without-web")
    app.main()
    return EXIT_OK


EXIT_BROKEN_PIPE = 141  # as a shell reports a process ended by SIGPIPE


def run_history(args: argparse.Namespace) -> int:
    with read_trail(args.db) as store:
        decisions = store.history(args.run_id)
    if args.json:
        for decision in decisions:
            print(json.dumps(decision.to_dict(), ensure_ascii=False))
        return EXIT_OK
    if not decisions:
        print(f"no loop decisions recorded for run {args.run_id}")
        return EXIT_OK
    for d in decisions:
        shadow = "" if d.enforced else f"[{OBSERVE_ONLY}] "
        print(
            f"seq {d.seq:>6}  {d.action.value:<5}  {d.detector:<24} {d.tool_name:<16} "
            f"count={d.count:<4} {shadow}{d.reason}"
        )
    return EXIT_OK


def run_runs(args: argparse.Namespace) -> int:
    with read_trail(args.db) as store:
        summaries = store.runs(
            agent=args.agent,
            gateway=args.gateway,
            detector=args.detector,
            severity=args.severity,
            since_ms=args.since,
            until_ms=args.until,
            limit=args.limit,
        )
    if args.json:
        print(json.dumps([s.to_dict() for s in summaries], ensure_ascii=False, indent=2))
        return EXIT_OK
    if not summaries:
        print("no runs match")
    for s in summaries:
        worst = s.worst_action.value + (f" ({OBSERVE_ONLY})" if s.worst_observed else "")
        print(
            f"{s.run_id:<34} agent={s.agent_id:<14} gateway={s.gateway_id:<10} "
            f"worst={worst:<5} warn={s.warn} block={s.block} abort={s.abort} "
            f"observed={s.observed} "
            f"status={_or_dash(s.status)} last_seq={_or_dash(s.last_seq)} "
            f"events={_or_dash(s.events)} detectors={','.join(s.detectors)}"
        )
    return EXIT_OK


def _or_dash(value: object) -> str:
    """A run's progress field, or ``-`` while no watermark of the run has been recorded."""
    return "-" if value is None else str(value)


def run_migrate(args: argparse.Namespace) -> int:
    from streams.audit.database import migrate
    from streams.settings import redact_url

    migrate(args.db)
    print(f"audit schema is at head on {redact_url(args.db)}")
    return EXIT_OK


def run_demo(args: argparse.Namespace) -> int:
    # Deferred: the demo pulls in the broker, the worker process and the gateway client.
    from streams.devtools.demo import run_demo as demo

    return demo(db_url=args.db, keep_running=args.keep_running)


COMMANDS = {
    "replay": run_replay,
    "backtest": run_backtest,
    "export": run_export,
    "config": run_config,
    "worker": run_worker,
    "demo": run_demo,
    "history": run_history,
    "runs": run_runs,
    "migrate": run_migrate,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
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
