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


def add_tail_parser(sub: Any) -> argparse.ArgumentParser:
    tail = sub.add_parser(
        "tail",
        help="follow loop decisions live on the control topic (like kafka-console-consumer)",
        description="Print each decision workers publish on the control topic (PREFIX.control) "
        "as it arrives: time (UTC), run, agent, seq, action, detector, tool and reason; with "
        "--json one JSON object per line (the same fields as `history --json`). Starts at "
        "the end of the topic (only new decisions) unless --from-beginning. Runs until "
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
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    shown = 0
    runs, agents = set(args.run), set(args.agent)
    try:
        while args.max is None or shown < args.max:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            try:
                record = records.get(timeout=0.5 if left is None else min(left, 0.5))
            except queue.Empty:
                continue
            try:
                message = decode_control(record.value)
            except CodecError:
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
    except KeyboardInterrupt:
        pass
    finally:
        follower.stop()
    return EXIT_OK
