"""``loopguard replay`` and ``loopguard export``: re-run the detector core over recorded events.

Replay reads a run's (several runs', a time range's) events from the events topic or from a
JSON-lines export file, feeds them through :class:`streams.core.engine.LoopGuard` with the config
file given, and compares what the core decides with the SQL audit trail:

* per run, the decisions are compared field by field (everything but ``config_version``) in
  ``(seq, detector, action)`` order; the first difference is printed with the event at its
  seq, and the exit code is :data:`streams.cli.main.EXIT_DIVERGED`;
* when the recorded decisions carry another ``config_version`` than the replay config
  resolves to for that agent, a note says so: the config in force then was different;
* a run whose first event (seq 1) is not in the selection cannot be re-derived and is
  reported as incomplete instead of being compared; recorded decisions for seqs past the
  last replayed event (a run still going, an ``--until`` cut) are left out and counted.

Nothing is written anywhere unless ``--publish-to TOPIC`` is given. Reading the topic uses no
consumer group (see :mod:`streams.kafka.reader`), so replays never disturb the workers.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from streams.cli.main import EXIT_DIVERGED, EXIT_ERROR, EXIT_OK, EXIT_USAGE
from streams.core.events import (
    EVENT_KINDS,
    AgentEvent,
    Decision,
    event_from_dict,
    event_to_dict,
)

DEFAULT_PROGRESS = 10_000
# Fields a replayed decision must reproduce; ``config_version`` is reported separately.
COMPARED_FIELDS = tuple(f.name for f in dataclass_fields(Decision) if f.name != "config_version")
MAX_SAMPLES = 5

MATCH, DIVERGED, INCOMPLETE, NOT_FOUND = "match", "diverged", "incomplete", "not_found"


class InputError(Exception):
    """Bad flags or a bad input file; reported in one line, exit code 2."""


# ------------------------------------------------------------------------------ arguments


def _epoch_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected epoch milliseconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected epoch milliseconds >= 0, got {value}")
    return value


def _offset_spec(text: str) -> tuple[int | None, int]:
    """``OFFSET`` (every partition) or ``PARTITION:OFFSET``."""
    part, sep, offset = text.rpartition(":")
    try:
        value = int(offset)
        partition = int(part) if sep else None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected OFFSET or PARTITION:OFFSET, got {text!r}"
        ) from None
    if value < 0 or (partition is not None and partition < 0):
        raise argparse.ArgumentTypeError(f"offsets and partitions are >= 0, got {text!r}")
    return partition, value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def add_topic_args(parser: argparse.ArgumentParser) -> None:
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


def _add_selection(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN_ID",
        help=f"only {verb} this run's events; repeat for several runs (default: every run)",
    )
    parser.add_argument(
        "--since",
        type=_epoch_ms,
        metavar="EPOCH_MS",
        help="only events with event_time >= this (epoch ms); on the topic, reading starts "
        "at the matching offsets (offsets_for_times, with a one-minute margin)",
    )
    parser.add_argument(
        "--until",
        type=_epoch_ms,
        metavar="EPOCH_MS",
        help="only events with event_time < this (epoch ms)",
    )
    parser.add_argument(
        "--from-offset",
        type=_offset_spec,
        action="append",
        default=[],
        metavar="[PARTITION:]OFFSET",
        help="start reading the events topic at this offset: OFFSET for every partition, or "
        "PARTITION:OFFSET for one (repeatable); default: the beginning. Reading always "
        "stops at the end offsets taken when the command starts",
    )
    parser.add_argument(
        "--progress",
        type=_non_negative,
        default=DEFAULT_PROGRESS,
        metavar="N",
        help=f"print progress to stderr every N messages read (default {DEFAULT_PROGRESS}; "
        "0 turns it off)",
    )


def add_replay_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``replay`` subparser; the caller adds ``--db`` (shared with history/runs)."""
    parser = sub.add_parser(
        "replay",
        help="re-run the detector core over recorded events and check the audit trail",
        description="Re-run the pure detector core (LoopGuard) over the events of one or "
        "more runs, or of a time range, read from the events topic or from an export file, "
        "then compare the decisions it makes with the SQL audit trail. Prints a per-run "
        "summary; for a divergence, the first differing decision (seq, expected vs recorded "
        "fields) and the event at that seq; and a note when the recorded decisions were made "
        "under another config version than --config resolves to. Exit code 0 when every "
        "compared run matches, 3 on any divergence, 1 when a --run could not be verified "
        "(no events, or its first events are not in the selection), 2 for bad input. "
        "Never writes to any topic unless --publish-to is given.",
    )
    parser.add_argument(
        "--config",
        default=os.environ.get("LOOPGUARD_CONFIG") or None,
        metavar="FILE",
        help="tools.loopDetection config file (JSON5, JSON, YAML) to replay with, as given to "
        "`loopguard worker --config` (env LOOPGUARD_CONFIG; default: the built-in defaults)",
    )
    parser.add_argument(
        "--from-file",
        metavar="FILE",
        help="read events from this JSON-lines export (`loopguard export`) instead of the "
        "events topic",
    )
    add_topic_args(parser)
    _add_selection(parser, "replay")
    parser.add_argument(
        "--publish-to",
        metavar="TOPIC",
        help="also publish the replayed decisions (Avro, key = run id) of the runs in scope "
        "(incomplete ones excepted) to this topic; only ever done when given, and the "
        "control topic is never implied",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as one JSON document on stdout"
    )
    return parser


def add_export_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "export",
        help="dump events from the events topic to a JSON-lines file (for audits, replay)",
        description="Read events from the events topic (same selection flags as replay) and "
        "write them to a JSON-lines file, one event per line in `event_to_dict` form, in "
        "the order read. The file is written atomically. Undecodable messages are counted "
        "and reported, not written. `loopguard replay --from-file` reads the file back.",
    )
    parser.add_argument(
        "-o",
        "--out",
        required=True,
        metavar="FILE",
        help="output file ('-' for stdout; the summary then goes to stderr)",
    )
    add_topic_args(parser)
    _add_selection(parser, "export")
    return parser


# -------------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class Selection:
    runs: frozenset[str] = frozenset()
    since_ms: int | None = None
    until_ms: int | None = None

    def wants(self, event: AgentEvent) -> bool:
        env = event.envelope
        if self.runs and env.run_id not in self.runs:
            return False
        if self.since_ms is not None and env.event_time < self.since_ms:
            return False
        return self.until_ms is None or env.event_time < self.until_ms


@dataclass
class ReadStats:
    messages: int = 0  # lines or topic records read
    selected: int = 0
    undecodable: int = 0
    samples: list[str] = field(default_factory=list)
    progress_every: int = 0
    progress_line: Callable[[], str] | None = None

    def tick(self) -> None:
        """Count one message read; every ``progress_every`` print a progress line to stderr."""
        self.messages += 1
        if self.progress_every and self.progress_line and self.messages % self.progress_every == 0:
            print(self.progress_line(), file=sys.stderr, flush=True)

    def bad(self, where: str, error: str) -> None:
        self.undecodable += 1
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(f"{where}: {error}")


Progress = Callable[[ReadStats], None]


def _check_types(data: dict[str, Any]) -> None:
    """Reject wrongly typed fields up front, so nothing downstream meets a surprise type."""
    cls = EVENT_KINDS.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown event kind {data.get('kind')!r}")
    for name in ("run_id", "seq"):
        if name not in data:
            raise ValueError(f"missing field {name!r}")
    for name in ("seq", "event_time"):
        value = data.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"field {name!r}: expected a whole number, got {value!r}")
    if not isinstance(data["run_id"], str) or not data["run_id"]:
        raise ValueError(f"field 'run_id': expected a non-empty string, got {data['run_id']!r}")
    for name in ("agent_id", "gateway_id"):
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"field {name!r}: expected a string, got {value!r}")
    for f in dataclass_fields(cls):
        if f.name == "envelope" or f.name not in data:
            continue
        value = data[f.name]
        optional = f.default is None  # not f.type: annotations do not survive mypyc (setup.py)
        if not (isinstance(value, str) or (optional and value is None)):
            want = "a string or null" if optional else "a string"
            raise ValueError(f"field {f.name!r}: expected {want}, got {value!r}")


def parse_event_line(text: str) -> AgentEvent:
    """One export line → event; ``ValueError`` says what is wrong with it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    _check_types(data)
    return event_from_dict(data)


class FileSource:
    """A JSON-lines export; any bad line stops the replay with its line number."""

    def __init__(self, path: str) -> None:
        self.path = path
        if not Path(path).is_file():
            raise InputError(f"{path}: not a readable file")

    def describe(self) -> str:
        return f"file {self.path}"

    def events(self, stats: ReadStats, selection: Selection) -> Iterator[AgentEvent]:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 (closed below, generator)
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read ({exc.strerror})") from None
        with handle:
            for number, raw in enumerate(handle, start=1):
                stats.tick()
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{self.path}:{number}: not UTF-8 text") from None
                if not text.strip():
                    continue
                try:
                    event = parse_event_line(text)
                except ValueError as exc:
                    raise InputError(f"{self.path}:{number}: invalid event: {exc}") from None
                if selection.wants(event):
                    stats.selected += 1
                    yield event


class TopicSource:
    """The events topic, between the offsets fixed when the source opens."""

    def __init__(self, reader: Any, max_message_bytes: int) -> None:
        self.reader = reader
        self.max_message_bytes = max_message_bytes

    def describe(self) -> str:
        return f"topic {self.reader.topic} ({len(self.reader.slices)} partitions)"

    def events(self, stats: ReadStats, selection: Selection) -> Iterator[AgentEvent]:
        from streams.wire.avro import CodecError, decode_event

        for record in self.reader.records():
            stats.tick()
            where = f"partition {record.partition} offset {record.offset}"
            if not record.value:
                stats.bad(where, "empty message")
                continue
            try:
                event = decode_event(record.value, max_size=self.max_message_bytes)
            except CodecError as exc:
                stats.bad(where, str(exc))
                continue
            if selection.wants(event):
                stats.selected += 1
                yield event


# --------------------------------------------------------------------------------- replay


@dataclass
class RunReplay:
    run_id: str
    agent_id: str = ""
    events: int = 0
    first_seq: int | None = None
    decisions: list[Decision] = field(default_factory=list)


def replay_events(guard: Any, events: Iterable[AgentEvent]) -> dict[str, RunReplay]:
    """Feed events through the core; decisions grouped per run, in the order produced."""
    runs: dict[str, RunReplay] = {}
    for event in events:
        env = event.envelope
        run = runs.get(env.run_id)
        if run is None:
            run = runs[env.run_id] = RunReplay(env.run_id)
        run.events += 1
        run.agent_id = run.agent_id or env.agent_id
        run.first_seq = env.seq if run.first_seq is None else min(run.first_seq, env.seq)
        for decision in guard.process(event):
            runs.setdefault(decision.run_id, RunReplay(decision.run_id)).decisions.append(decision)
    return runs


def _order(decision: Decision) -> tuple[int, str, str]:
    return decision.seq, decision.detector, decision.action.value


def _jsonable(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


@dataclass
class Divergence:
    seq: int
    expected: Decision | None
    recorded: Decision | None
    fields: list[tuple[str, Any, Any]]
    event: AgentEvent | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "expected": self.expected.to_dict() if self.expected else None,
            "recorded": self.recorded.to_dict() if self.recorded else None,
            "fields": [
                {"field": name, "expected": _jsonable(exp), "recorded": _jsonable(rec)}
                for name, exp, rec in self.fields
            ],
            "event": event_to_dict(self.event) if self.event else None,
        }

    def describe(self) -> list[str]:
        exp, rec = self.expected, self.recorded
        if exp is not None and rec is not None:
            lines = [f"first divergence at seq {self.seq}: the decisions differ"]
            lines += [
                f"  {name}: expected {_jsonable(e)!r}, recorded {_jsonable(r)!r}"
                for name, e, r in self.fields
            ]
        elif exp is not None:
            lines = [
                f"first divergence at seq {self.seq}: replay decides "
                f"{exp.action.value}/{exp.detector}, the audit trail has no such decision",
                f"  expected: {_brief(exp)}",
            ]
        else:
            assert rec is not None
            lines = [
                f"first divergence at seq {self.seq}: the audit trail records "
                f"{rec.action.value}/{rec.detector}, replay does not decide it",
                f"  recorded: {_brief(rec)}",
            ]
        if self.event is None:
            lines.append(f"event at seq {self.seq}: not in the selection")
        else:
            text = json.dumps(event_to_dict(self.event), ensure_ascii=False)
            lines.append(f"event at seq {self.seq}: {text}")
        return lines


def _brief(d: Decision) -> str:
    return (
        f"action={d.action.value} detector={d.detector} severity={d.severity} count={d.count} "
        f"tool={d.tool_name} error_code={d.error_code or '-'} reason={d.reason!r}"
    )


def first_divergence(expected: list[Decision], recorded: list[Decision]) -> Divergence | None:
    """First position where the two (sorted) decision lists differ, or None."""
    for index in range(max(len(expected), len(recorded))):
        exp = expected[index] if index < len(expected) else None
        rec = recorded[index] if index < len(recorded) else None
        if exp is not None and rec is not None:
            if _order(exp) != _order(rec):
                # Different decisions at this position: the earlier one is the divergence.
                if _order(exp) < _order(rec):
                    return Divergence(exp.seq, exp, None, [])
                return Divergence(rec.seq, None, rec, [])
            diff = [
                (name, getattr(exp, name), getattr(rec, name))
                for name in COMPARED_FIELDS
                if getattr(exp, name) != getattr(rec, name)
            ]
            if diff:
                return Divergence(exp.seq, exp, rec, diff)
        elif exp is not None:
            return Divergence(exp.seq, exp, None, [])
        elif rec is not None:
            return Divergence(rec.seq, None, rec, [])
    return None


@dataclass
class RunReport:
    run_id: str
    agent_id: str
    status: str
    requested: bool
    events: int = 0
    first_seq: int | None = None
    last_seq: int = 0  # last event the core processed (in seq order)
    waiting: int = 0  # events held back behind a gap, as the worker would hold them
    duplicates: int = 0
    replayed: int = 0
    recorded: int = 0
    beyond: int = 0  # recorded decisions past last_seq: not comparable with this selection
    divergence: Divergence | None = None
    replay_version: str = ""
    recorded_versions: list[str] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    @property
    def version_differs(self) -> bool:
        return any(v != self.replay_version for v in self.recorded_versions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "status": self.status,
            "requested": self.requested,
            "events": self.events,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "waiting": self.waiting,
            "duplicates": self.duplicates,
            "replayed": self.replayed,
            "recorded": self.recorded,
            "recorded_beyond_selection": self.beyond,
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "replay_config_version": self.replay_version,
            "recorded_config_versions": self.recorded_versions,
            "config_version_differs": self.version_differs,
        }

    def describe(self) -> list[str]:
        head = (
            f"run {self.run_id}  agent={self.agent_id or '-'}  events={self.events}  "
            f"decisions: replayed {self.replayed}, recorded {self.recorded}  "
            f"{self.status.upper().replace('_', ' ')}"
        )
        lines = [head]
        if self.status == INCOMPLETE:
            lines.append(
                f"  not compared: its events start at seq {self.first_seq}; events before "
                "that are not in the selection, so its state cannot be re-derived"
            )
            return lines
        if self.status == NOT_FOUND:
            lines.append("  not compared: no events of this run in the selection")
            return lines
        if self.divergence is not None:
            lines += [f"  {line}" for line in self.divergence.describe()]
        if self.beyond:
            lines.append(
                f"  {self.beyond} recorded decision(s) after seq {self.last_seq} (the last "
                "replayed event) not compared"
            )
        if self.waiting:
            lines.append(
                f"  {self.waiting} event(s) wait behind a missing seq after {self.last_seq} "
                "(held back, as a worker holds them)"
            )
        if self.recorded_versions and self.version_differs:
            lines.append(
                "  note: the recorded decisions were made under config version "
                f"{', '.join(self.recorded_versions)}; the replay config resolves to "
                f"{self.replay_version} for agent {self.agent_id or '-'}: the config in force "
                "differed"
            )
        return lines


def compare_run(
    run_id: str,
    replay: RunReplay | None,
    state: Any,
    recorded_all: list[Decision],
    replay_version: str,
    requested: bool,
) -> RunReport:
    agent = (replay.agent_id if replay else "") or (
        recorded_all[0].agent_id if recorded_all else ""
    )
    report = RunReport(run_id, agent, MATCH, requested, replay_version=replay_version)
    report.recorded_versions = sorted({d.config_version for d in recorded_all})
    if replay is None or replay.events == 0:
        report.status = NOT_FOUND
        report.recorded = len(recorded_all)
        return report
    report.events = replay.events
    report.first_seq = replay.first_seq
    report.decisions = sorted(replay.decisions, key=_order)
    if state is not None:
        report.last_seq = state.last_seq
        report.waiting = len(state.waiting)
        report.duplicates = state.stats.duplicates
    comparable = [d for d in recorded_all if d.seq <= report.last_seq]
    report.beyond = len(recorded_all) - len(comparable)
    report.replayed = len(report.decisions)
    report.recorded = len(comparable)
    if (replay.first_seq or 0) > 1:
        report.status = INCOMPLETE
        report.recorded, report.beyond = len(recorded_all), 0
        return report
    report.divergence = first_divergence(report.decisions, sorted(comparable, key=_order))
    if report.divergence is not None:
        report.status = DIVERGED
    return report


def _find_events(
    source: Any, selection: Selection, wanted: dict[str, set[int]]
) -> dict[tuple[str, int], AgentEvent]:
    """Read the source again for the events at the divergence seqs (first copy wins)."""
    found: dict[tuple[str, int], AgentEvent] = {}
    need = sum(len(seqs) for seqs in wanted.values())
    narrowed = Selection(frozenset(wanted), selection.since_ms, selection.until_ms)
    for event in source.events(ReadStats(), narrowed):
        key = (event.envelope.run_id, event.envelope.seq)
        if key[1] in wanted.get(key[0], ()) and key not in found:
            found[key] = event
            if len(found) == need:
                break
    return found


# ---------------------------------------------------------------------------- entrypoints


def _settings(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from streams.settings import Settings, Topics

    return replace(
        Settings.from_env(), broker=args.broker, topics=Topics.with_prefix(args.topic_prefix)
    )


def _check_range(args: argparse.Namespace) -> None:
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise InputError(f"--since {args.since} must be before --until {args.until}")


def _selection(args: argparse.Namespace) -> Selection:
    return Selection(frozenset(args.run), args.since, args.until)


def _open_topic(args: argparse.Namespace, settings: Any) -> Any:
    from streams.kafka.reader import TopicReader

    offsets: dict[int | None, int] = {}
    for partition, offset in args.from_offset:
        offsets[partition] = offset
    return TopicReader(
        settings.bootstrap_servers,
        settings.topics.events,
        kafka_options=settings.kafka_client_options(),
        from_offsets=offsets,
        since_ms=args.since,
    ).open()


def _progress_line(verb: str, stats: ReadStats, reader: Any, extra: str = "") -> str:
    done = ""
    if reader is not None and reader.total:
        done = f" (~{min(100, stats.messages * 100 // reader.total)}% of the slice)"
    return (
        f"{verb}: {stats.messages} messages read{done}, {stats.selected} events selected, "
        f"{stats.undecodable} undecodable{extra}"
    )


def quiet_kafka() -> None:
    """These commands report broker trouble themselves, in one line; no client log spam."""
    logging.getLogger("kafka").setLevel(logging.CRITICAL)


def _run_reporting_errors(
    command: str, work: Callable[[argparse.Namespace], int], args: argparse.Namespace
) -> int:
    """Run a subcommand; bad input and broker trouble end it with one line, not a trace."""
    from kafka.errors import KafkaError

    from streams.kafka.reader import ReaderError

    quiet_kafka()
    try:
        return work(args)
    except InputError as exc:
        print(f"loopguard {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ReaderError as exc:
        print(f"loopguard {command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KafkaError as exc:
        print(f"loopguard {command}: broker {args.broker}: {exc}", file=sys.stderr)
        return EXIT_ERROR


def run_replay(args: argparse.Namespace) -> int:
    return _run_reporting_errors("replay", _replay, args)


def _replay(args: argparse.Namespace) -> int:
    from streams.audit.store import AuditStore
    from streams.core.config import ConfigError, FleetConfig, load_fleet_config
    from streams.core.engine import LoopGuard
    from streams.settings import redact_url

    _check_range(args)
    if args.from_file and args.from_offset:
        raise InputError("--from-offset applies to the events topic, not to --from-file")
    try:
        fleet = load_fleet_config(args.config) if args.config else FleetConfig()
    except ConfigError as exc:
        raise InputError(f"invalid config: {exc}") from None
    selection = _selection(args)
    settings = _settings(args)
    reader = None
    if args.from_file:
        source: Any = FileSource(args.from_file)
    else:
        reader = _open_topic(args, settings)
        source = TopicSource(reader, settings.max_message_bytes)
    store = AuditStore(args.db)
    try:
        try:
            store.decision_count()  # fail before a long replay, not after it
        except Exception as exc:  # SQLAlchemy errors vary by driver; one line is enough
            print(
                f"loopguard replay: cannot read the audit trail at {redact_url(args.db)}: "
                f"{str(exc).splitlines()[0]}",
                file=sys.stderr,
            )
            return EXIT_ERROR
        guard = LoopGuard(fleet)
        stats = ReadStats(progress_every=args.progress)
        stats.progress_line = lambda: _progress_line(
            "replay", stats, reader, f", {len(guard.runs)} runs so far"
        )
        started = time.monotonic()
        runs = replay_events(guard, source.events(stats, selection))
        scope = list(args.run) if args.run else sorted(runs)
        reports = []
        for run_id in scope:
            replay = runs.get(run_id)
            agent = replay.agent_id if replay else ""
            recorded = store.history(run_id)
            if not agent and recorded:
                agent = recorded[0].agent_id
            reports.append(
                compare_run(
                    run_id,
                    replay,
                    guard.runs.get(run_id),
                    recorded,
                    guard.config_for(agent).version,
                    requested=bool(args.run),
                )
            )
    finally:
        store.close()
    wanted: dict[str, set[int]] = {}
    for report in reports:
        if report.divergence is not None:
            wanted.setdefault(report.run_id, set()).add(report.divergence.seq)
    if wanted:
        found = _find_events(source, selection, wanted)
        for report in reports:
            if report.divergence is not None:
                report.divergence.event = found.get((report.run_id, report.divergence.seq))
    published = 0
    if args.publish_to:
        published = _publish(settings, args.publish_to, reports)
    if reader is not None:
        reader.close()
    code = _exit_code(reports)
    elapsed = time.monotonic() - started
    if args.json:
        print(
            json.dumps(
                _report_dict(args, source, stats, reports, published, code, elapsed),
                ensure_ascii=False,
                indent=2,
            )
        )
    else:
        _print_report(args, source, stats, reports, published, elapsed, sys.stdout)
    return code


def _exit_code(reports: list[RunReport]) -> int:
    if any(r.status == DIVERGED for r in reports):
        return EXIT_DIVERGED
    if any(r.requested and r.status in (INCOMPLETE, NOT_FOUND) for r in reports):
        return EXIT_ERROR
    return EXIT_OK


def _publish(settings: Any, topic: str, reports: list[RunReport]) -> int:
    from kafka import KafkaProducer

    from streams.wire.avro import encode_decision

    producer = KafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        acks="all",
        **settings.kafka_client_options(),
    )
    sent = 0
    try:
        for report in reports:
            if report.status == INCOMPLETE:
                continue  # derived from a partial history: not worth publishing
            for decision in report.decisions:
                producer.send(topic, key=decision.run_id.encode(), value=encode_decision(decision))
                sent += 1
        producer.flush(timeout=30)
    finally:
        producer.close()
    return sent


def _counts(reports: list[RunReport]) -> dict[str, int]:
    counts = {MATCH: 0, DIVERGED: 0, INCOMPLETE: 0, NOT_FOUND: 0}
    for report in reports:
        counts[report.status] += 1
    return counts


def _report_dict(
    args: argparse.Namespace,
    source: Any,
    stats: ReadStats,
    reports: list[RunReport],
    published: int,
    code: int,
    elapsed: float,
) -> dict[str, Any]:
    return {
        "source": source.describe(),
        "config": args.config or "(built-in defaults)",
        "messages": stats.messages,
        "events": stats.selected,
        "undecodable": stats.undecodable,
        "undecodable_samples": stats.samples,
        "runs": [r.to_dict() for r in reports],
        "summary": _counts(reports),
        "published": published,
        "publish_topic": args.publish_to,
        "exit_code": code,
        "seconds": round(elapsed, 3),
    }


def _print_report(
    args: argparse.Namespace,
    source: Any,
    stats: ReadStats,
    reports: list[RunReport],
    published: int,
    elapsed: float,
    out: TextIO,
) -> None:
    print(
        f"replayed {stats.selected} events of {len(reports)} run(s) from {source.describe()} "
        f"with config {args.config or '(built-in defaults)'} in {elapsed:.1f}s",
        file=out,
    )
    if stats.undecodable:
        print(f"{stats.undecodable} undecodable message(s) skipped, e.g.:", file=out)
        for sample in stats.samples:
            print(f"  {sample}", file=out)
    for report in reports:
        for line in report.describe():
            print(line, file=out)
    counts = _counts(reports)
    print(
        f"summary: {counts[MATCH]} match, {counts[DIVERGED]} diverged, "
        f"{counts[INCOMPLETE]} incomplete, {counts[NOT_FOUND]} without events",
        file=out,
    )
    if args.publish_to:
        print(f"published {published} replayed decision(s) to {args.publish_to}", file=out)


def run_export(args: argparse.Namespace) -> int:
    return _run_reporting_errors("export", _export, args)


def _export(args: argparse.Namespace) -> int:
    _check_range(args)
    settings = _settings(args)
    reader = _open_topic(args, settings)
    selection = _selection(args)
    stats = ReadStats(progress_every=args.progress)
    stats.progress_line = lambda: _progress_line("export", stats, reader)
    runs: set[str] = set()
    to_stdout = args.out == "-"
    try:
        events = TopicSource(reader, settings.max_message_bytes).events(stats, selection)
        if to_stdout:
            for event in events:
                runs.add(event.envelope.run_id)
                sys.stdout.write(json.dumps(event_to_dict(event), ensure_ascii=False) + "\n")
            sys.stdout.flush()
        else:
            _write_atomically(Path(args.out), events, runs)
    except OSError as exc:
        print(f"loopguard export: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        reader.close()
    summary = sys.stderr if to_stdout else sys.stdout
    print(
        f"exported {stats.selected} events of {len(runs)} run(s) from {reader.topic} to {args.out}",
        file=summary,
    )
    if stats.undecodable:
        print(f"{stats.undecodable} undecodable message(s) skipped, e.g.:", file=summary)
        for sample in stats.samples:
            print(f"  {sample}", file=summary)
    return EXIT_OK


def _write_atomically(path: Path, events: Iterable[AgentEvent], runs: set[str]) -> None:
    directory = path.resolve().parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for event in events:
                runs.add(event.envelope.run_id)
                handle.write(json.dumps(event_to_dict(event), ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
