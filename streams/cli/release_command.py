"""``loopguard release`` and ``loopguard abort`` (issue 43): an operator lets a stopped run go
on (warnings only for N calls or until a time) or stops it, with who and why. The command is
published on the events topic under the run's key, so the worker applies it among the run's
events (replay reproduces it) and the audit trail records it (``operator_releases``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from streams.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    InputError,
    add_db_arg,
    add_topic_args,
    read_trail,
    run_reporting_errors,
    settings_from_args,
)
from streams.cli.query_commands import positive_int
from streams.cli.times import format_ms, parse_time
from streams.core.operator_command import ABORT, DEFAULT_RELEASE_CALLS, RELEASE, OperatorCommand

DEFAULT_CALLS = DEFAULT_RELEASE_CALLS


def add_release_parsers(sub: Any) -> None:
    """The ``release`` and ``abort`` subparsers."""
    release = sub.add_parser(
        "release",
        help="let a blocked run go on: warnings only for N calls (or until a time)",
        description=(
            "Release a run the guard blocked: its next call goes through, its loop counters "
            "restart from that call, and for --calls N calls (default "
            f"{DEFAULT_CALLS}) or until --until TIME it draws warnings only; then the guard "
            "resumes. Published on the events topic, applied by the worker that holds the run, "
            "recorded in the audit trail with --by and --reason (loopguard history RUN)."
        ),
    )
    window = release.add_mutually_exclusive_group()
    window.add_argument("--calls", type=positive_int, metavar="N", help="warnings only for N calls")
    window.add_argument(
        "--until",
        metavar="TIME",
        help="warnings only until TIME: a duration from now (30m, 2h), an ISO date-time "
        "(2026-12-04T10:00; UTC unless it names a zone) or epoch milliseconds",
    )
    _common(release, "release")
    abort = sub.add_parser(
        "abort",
        help="stop a run now, as a detector's abort would",
        description=(
            "Abort a run: the worker publishes an abort its gateway obeys (the run's next call "
            "raises RunAborted), recorded in the audit trail with --by and --reason."
        ),
    )
    _common(abort, "abort")


def _common(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("run_id", nargs="?", metavar="RUN", help=f"the run to {verb}")
    parser.add_argument("--agent", metavar="AGENT", help=f"{verb} every active run of AGENT")
    parser.add_argument("--reason", required=True, help="why (recorded, shown in history)")
    parser.add_argument("--by", metavar="WHO", help="who (default: the OS user)")
    parser.add_argument(
        "--session",
        metavar="SESSION",
        help="the run's session id, when it has one (its events' key; the worker that holds "
        "it gets the command in order with them)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per command sent")
    add_topic_args(parser)
    add_db_arg(parser)


def until_time(text: str, now_ms: int) -> int:
    """``--until``: a duration counts forward from now; a date-time or epoch ms as given."""
    value = text.strip()
    try:
        if value[-1:].lower() in "smhdw" and not value.isdigit():
            back = parse_time(value, now_ms)  # a duration back from now: mirror it forward
            return now_ms + (now_ms - back)
        return parse_time(value, now_ms)
    except ValueError as exc:
        raise InputError(f"--until: {exc}") from None


def run_release(args: argparse.Namespace) -> int:
    return run_reporting_errors(args.command, _send, args)


def _send(args: argparse.Namespace) -> int:
    from streams.audit.releases import KnownRun, active_runs, known_run
    from streams.kafka.operator_commands import (
        build_command,
        new_release_id,
        operator_name,
        send_commands,
    )

    if bool(args.run_id) == bool(args.agent):
        raise InputError("name one run (RUN) or --agent AGENT")
    if not args.reason.strip():
        raise InputError("--reason must say why")
    verb = RELEASE if args.command == "release" else ABORT
    now_ms = int(time.time() * 1000)
    calls = getattr(args, "calls", None)
    until_text = getattr(args, "until", None)
    until = None if until_text is None else until_time(until_text, now_ms)
    if until is not None and until <= now_ms:
        raise InputError(f"--until {until_text}: {format_ms(until)} is not in the future")
    if verb == RELEASE and calls is None and until is None:
        calls = DEFAULT_CALLS
    store = read_trail(args.db)
    try:
        with store.engine.connect() as conn:
            if args.agent:
                runs: list[KnownRun] = active_runs(conn, args.agent)
                if not runs:
                    print(
                        f"loopguard {args.command}: no active run of agent {args.agent!r} "
                        "in the audit trail",
                        file=sys.stderr,
                    )
                    return EXIT_ERROR
            else:
                run = known_run(conn, args.run_id)
                if run is None or run.status != "active":
                    why = (
                        f"no run {args.run_id!r} in the audit trail"
                        if run is None
                        else f"run {args.run_id!r} is {run.status} (nothing to {verb})"
                    )
                    print(f"loopguard {args.command}: {why}", file=sys.stderr)
                    return EXIT_ERROR
                runs = [run]
    finally:
        store.close()
    release_id = new_release_id()
    by = args.by or operator_name()
    commands: list[OperatorCommand] = [
        build_command(
            run.run_id,
            run.agent_id,
            verb,
            release_id=release_id,
            reason=args.reason.strip(),
            released_by=by,
            calls=calls,
            until=until,
            session_id=args.session,
            scope="agent" if args.agent else "run",
            now_ms=now_ms,
        )
        for run in runs
    ]
    send_commands(settings_from_args(args), commands)
    for command in commands:
        if args.json:
            print(json.dumps(_as_json(command), sort_keys=True))
        else:
            print(_line(command))
    return EXIT_OK


def _window(command: OperatorCommand) -> str:
    if command.calls is not None:
        return f"warnings only for {command.calls} call(s)"
    return f"warnings only until {format_ms(command.until)}"


def _line(command: OperatorCommand) -> str:
    run = command.envelope.run_id
    if command.command == ABORT:
        return f"abort of run {run} sent (id {command.release_id}) by {command.released_by}"
    return (
        f"release of run {run} sent (id {command.release_id}) by {command.released_by}: "
        f"{_window(command)}; `loopguard history {run}` shows it once the worker applied it"
    )


def _as_json(command: OperatorCommand) -> dict[str, Any]:
    return {
        "command": command.command,
        "release_id": command.release_id,
        "run_id": command.envelope.run_id,
        "agent_id": command.envelope.agent_id,
        "calls": command.calls,
        "until": command.until,
        "reason": command.reason,
        "released_by": command.released_by,
        "scope": command.scope,
        "sent_at": command.envelope.event_time,
    }
