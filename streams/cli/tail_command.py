"""``loopguard tail``: follow the decisions on the control topic as they are made.

What ``kafka-console-consumer`` would show, decoded and filtered: one line (or, with
``--json``, one JSON object) per decision, in the order each control partition has them.
Watermarks (the workers' progress records) are not shown. It joins no consumer group and
commits nothing, so tailing never disturbs a worker or a gateway.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time
from collections.abc import Callable
from typing import Any

from streams.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    add_topic_args,
    run_reporting_errors,
    settings_from_args,
)
from streams.cli.query_commands import positive_int
from streams.cli.times import format_ms
from streams.settings import redact_urls

TOPIC_WAIT = 10.0  # seconds to wait for a control topic that workers have not created yet
IDLE_NOTICE_S = 60.0  # on a terminal, a "still waiting" line after this long with no decision


class IdleNotice:
    """What ``tail`` says while no decision comes (issue 41): decisions appear only when a
    worker finds a loop, so a quiet fleet looks like a hung command. On a terminal, a line on
    stderr after every ``every`` seconds without a decision shown; never on stdout, so
    ``--json`` output stays decisions only."""

    def __init__(
        self, topic: str, every: float = IDLE_NOTICE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.topic = topic
        self.every = every
        self.clock = clock
        self.shown = 0
        self.last = clock()  # when the last decision was shown, or the start
        self.next_at = self.last + every

    def decision_shown(self) -> None:
        self.shown += 1
        self.last = self.clock()
        self.next_at = self.last + self.every

    def due(self) -> str | None:
        """The line to print now, if one is due (the next is due a whole ``every`` later)."""
        now = self.clock()
        if now < self.next_at:
            return None
        quiet = now - self.last
        quiet -= quiet % self.every  # in whole periods: 1m, 2m, ...
        self.next_at = self.last + quiet + self.every
        return (
            f"still following {self.topic}: no new decision for {format_duration(quiet)} "
            f"({self.shown} shown so far)"
        )


def format_duration(seconds: float) -> str:
    """``45s``, ``2m``, ``1h 5m``: how long ``tail`` has been quiet."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes = whole // 60
    return f"{minutes}m" if minutes < 60 else f"{minutes // 60}h {minutes % 60}m"


def waiting_line(topic: str, broker: str, from_beginning: bool) -> str:
    """``tail``'s first line (stderr): where it reads, from where, and that it waits."""
    start = "from its oldest decision" if from_beginning else "from its end (new decisions only)"
    return (
        f"following {topic} on {redact_urls(broker)} {start}: waiting for decisions "
        "(a worker publishes one only when it finds a loop; Ctrl-C stops)"
    )


def add_tail_parser(sub: Any) -> argparse.ArgumentParser:
    tail = sub.add_parser(
        "tail",
        help="follow loop decisions live on the control topic (like kafka-console-consumer)",
        description="Print each decision workers publish on the control topic (PREFIX.control) "
        "as it arrives: time (UTC), run, agent, seq, action, detector, tool and reason; with "
        "--json one JSON object per line (the same fields as `history --json`). Starts at "
        "the end of the topic (only new decisions) unless --from-beginning. A first line "
        "on stderr says where it reads and that it waits (decisions come only when a worker "
        "finds a loop); on a terminal, another after each minute without one. Runs until "
        "Ctrl-C, --max decisions or --timeout seconds; exit code 0 then, 1 when the broker "
        "or the topic is not there.",
    )
    add_topic_args(tail)
    tail.add_argument(
        "--run", action="append", default=[], metavar="RUN_ID", help="only this run (repeatable)"
    )
    tail.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="AGENT_ID",
        help="only this agent (repeatable)",
    )
    tail.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the oldest decision the topic still holds, not at its end",
    )
    tail.add_argument("--max", type=positive_int, metavar="N", help="stop after N decisions")
    tail.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    tail.add_argument(
        "--json", action="store_true", help="print JSON lines: one object per decision"
    )
    return tail


def decision_line(d: Any) -> str:
    """One decision as ``tail`` prints it."""
    shadow = " [observe only]" if not d.enforced else ""
    return (
        f"{format_ms(d.event_time)}  {d.run_id}  agent={d.agent_id}  seq={d.seq}  "
        f"{d.action.value.upper():<5} {d.detector} (count {d.count}) {d.tool_name}{shadow}: "
        f"{d.reason}"
    )


def run_tail(args: argparse.Namespace) -> int:
    return run_reporting_errors("tail", _tail, args)


def _tail(args: argparse.Namespace) -> int:
    from streams.core.events import Decision
    from streams.kafka.reader import TopicFollower
    from streams.wire.avro import CodecError, decode_control
    from streams.wire.errors import one_line

    settings = settings_from_args(args)
    records: queue.Queue[Any] = queue.Queue()
    follower = TopicFollower(
        settings.bootstrap_servers,
        settings.topics.control,
        records.put,
        from_end=not args.from_beginning,
        thread_name="loopguard-tail",
        isolation_level="read_committed",  # an aborted transaction's decisions never counted
        **settings.kafka_client_options(),
    )
    if not follower.open(wait=TOPIC_WAIT):
        print(
            f"loopguard tail: topic {settings.topics.control} not found on "
            f"{redact_urls(args.broker)} "
            "(has a worker run there? check --topic-prefix)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    follower.start()
    print(waiting_line(settings.topics.control, args.broker, args.from_beginning), file=sys.stderr)
    idle = IdleNotice(settings.topics.control) if sys.stderr.isatty() else None
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    shown = 0
    runs, agents = set(args.run), set(args.agent)
    try:
        while args.max is None or shown < args.max:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            notice = idle.due() if idle is not None else None
            if notice is not None:
                print(notice, file=sys.stderr, flush=True)
            try:
                record = records.get(timeout=0.5 if left is None else min(left, 0.5))
            except queue.Empty:
                continue
            if record.value is None:  # a tombstone: nothing to show
                continue
            try:
                message = decode_control(record.value)
            except Exception as exc:  # noqa: BLE001 - issue 40: no record ends the reader
                # Watermarks and decisions only; anything else is one line on stderr (kept
                # off stdout: --json output stays decisions), and the next record is read.
                why = str(exc) if isinstance(exc, CodecError) else one_line(exc)
                print(
                    f"loopguard tail: skipping an unreadable record at "
                    f"{settings.topics.control}[{record.partition}]@{record.offset}: {why}",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            if not isinstance(message, Decision):
                continue
            if (runs and message.run_id not in runs) or (agents and message.agent_id not in agents):
                continue
            if args.json:
                print(json.dumps(message.to_dict(), ensure_ascii=False), flush=True)
            else:
                print(decision_line(message), flush=True)
            shown += 1
            if idle is not None:
                idle.decision_shown()
    except KeyboardInterrupt:
        pass
    finally:
        follower.stop()
    return EXIT_OK
