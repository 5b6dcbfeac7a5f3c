"""Re-run the detector core over recorded events and compare with the audit trail.

Replay reads a run's (several runs', a time range's) events from the events topic or from a
JSON-lines export file, feeds them through :class:`streams.core.engine.LoopGuard` with the config
file given, and compares what the core decides with the SQL audit trail:

* per run, the decisions are compared field by field (everything but ``config_version``) in
  ``(seq, detector, action)`` order; the first difference is reported with the event at its
  seq (``loopguard replay`` then exits with code 3);
* when the recorded decisions carry another ``config_version`` than the replay config
  resolves to for that agent, a note says so: the config in force then was different;
* a run whose first event (seq 1) is not in the selection cannot be re-derived and is
  reported as incomplete instead of being compared; recorded decisions for seqs past the
  last replayed event (a run still going, an ``--until`` cut) are left out and counted.

Nothing is written anywhere unless a publish topic is given. Reading the topic uses no
consumer group (see :mod:`streams.kafka.reader`), so replays never disturb the workers. The
command line (flags, exit codes) is :mod:`streams.cli.replay_commands`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from streams.core.events import (
    EVENT_KINDS,
    AgentEvent,
    Decision,
    event_from_dict,
    event_to_dict,
)

# Fields a replayed decision must reproduce; ``config_version`` is reported separately.
COMPARED_FIELDS = tuple(f.name for f in dataclass_fields(Decision) if f.name != "config_version")
MAX_SAMPLES = 5

MATCH, DIVERGED, INCOMPLETE, NOT_FOUND = "match", "diverged", "incomplete", "not_found"


class SourceError(Exception):
    """An event source cannot be read as asked (a missing file, a bad line): bad input."""


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

    def print_undecodable(self, out: TextIO) -> None:
        """How many messages were skipped as undecodable, with a few samples (if any)."""
        if self.undecodable:
            print(f"{self.undecodable} undecodable message(s) skipped, e.g.:", file=out)
            for sample in self.samples:
                print(f"  {sample}", file=out)


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
            raise SourceError(f"{path}: not a readable file")

    def describe(self) -> str:
        return f"file {self.path}"

    def events(self, stats: ReadStats, selection: Selection) -> Iterator[AgentEvent]:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 (closed below, generator)
        except OSError as exc:
            raise SourceError(f"{self.path}: cannot read ({exc.strerror})") from None
        with handle:
            for number, raw in enumerate(handle, start=1):
                stats.tick()
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise SourceError(f"{self.path}:{number}: not UTF-8 text") from None
                if not text.strip():
                    continue
                try:
                    event = parse_event_line(text)
                except ValueError as exc:
                    raise SourceError(f"{self.path}:{number}: invalid event: {exc}") from None
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


# ------------------------------------------------------------------------------- running


def open_topic_reader(
    settings: Any, from_offsets: dict[int | None, int], since_ms: int | None
) -> Any:
    """A group-less reader of the events topic, its slice fixed now (see TopicReader)."""
    from streams.kafka.reader import TopicReader

    return TopicReader(
        settings.bootstrap_servers,
        settings.topics.events,
        kafka_options=settings.kafka_client_options(),
        from_offsets=from_offsets,
        since_ms=since_ms,
    ).open()


def progress_line(verb: str, stats: ReadStats, reader: Any, extra: str = "") -> str:
    done = ""
    if reader is not None and reader.total:
        done = f" (~{min(100, stats.messages * 100 // reader.total)}% of the slice)"
    return (
        f"{verb}: {stats.messages} messages read{done}, {stats.selected} events selected, "
        f"{stats.undecodable} undecodable{extra}"
    )


def compare_with_audit(
    guard: Any,
    runs: dict[str, RunReplay],
    scope: list[str],
    history: Callable[[str], list[Decision]],
    requested: bool,
) -> list[RunReport]:
    """One report per run in ``scope``: its replay against ``history(run_id)``."""
    reports = []
    for run_id in scope:
        replay = runs.get(run_id)
        agent = replay.agent_id if replay else ""
        recorded = history(run_id)
        if not agent and recorded:
            agent = recorded[0].agent_id
        reports.append(
            compare_run(
                run_id,
                replay,
                guard.runs.get(run_id),
                recorded,
                guard.config_for(agent).version,
                requested=requested,
            )
        )
    return reports


def attach_divergence_events(source: Any, selection: Selection, reports: list[RunReport]) -> None:
    """Give each divergence the event at its seq, read again from the source."""
    wanted: dict[str, set[int]] = {}
    for report in reports:
        if report.divergence is not None:
            wanted.setdefault(report.run_id, set()).add(report.divergence.seq)
    if not wanted:
        return
    found = _find_events(source, selection, wanted)
    for report in reports:
        if report.divergence is not None:
            report.divergence.event = found.get((report.run_id, report.divergence.seq))


def publish_decisions(settings: Any, topic: str, reports: list[RunReport]) -> int:
    """Publish the replayed decisions (Avro, key = run id) of complete runs; how many."""
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


def report_dict(
    source: str,
    config: str,
    stats: ReadStats,
    reports: list[RunReport],
    published: int,
    publish_topic: str | None,
    code: int,
    elapsed: float,
) -> dict[str, Any]:
    return {
        "source": source,
        "config": config,
        "messages": stats.messages,
        "events": stats.selected,
        "undecodable": stats.undecodable,
        "undecodable_samples": stats.samples,
        "runs": [r.to_dict() for r in reports],
        "summary": _counts(reports),
        "published": published,
        "publish_topic": publish_topic,
        "exit_code": code,
        "seconds": round(elapsed, 3),
    }


def print_report(
    source: str,
    config: str,
    stats: ReadStats,
    reports: list[RunReport],
    published: int,
    publish_topic: str | None,
    elapsed: float,
    out: TextIO | None = None,
) -> None:
    out = out or sys.stdout
    print(
        f"replayed {stats.selected} events of {len(reports)} run(s) from {source} "
        f"with config {config} in {elapsed:.1f}s",
        file=out,
    )
    stats.print_undecodable(out)
    for report in reports:
        for line in report.describe():
            print(line, file=out)
    counts = _counts(reports)
    print(
        f"summary: {counts[MATCH]} match, {counts[DIVERGED]} diverged, "
        f"{counts[INCOMPLETE]} incomplete, {counts[NOT_FOUND]} without events",
        file=out,
    )
    if publish_topic:
        print(f"published {published} replayed decision(s) to {publish_topic}", file=out)


# --------------------------------------------------------------------------------- export


def write_event_lines(events: Iterable[AgentEvent], out: TextIO) -> set[str]:
    """Write events as JSON lines (``event_to_dict`` form); returns the run ids written."""
    runs: set[str] = set()
    for event in events:
        runs.add(event.envelope.run_id)
        out.write(json.dumps(event_to_dict(event), ensure_ascii=False) + "\n")
    return runs


def write_events_atomically(path: Path, events: Iterable[AgentEvent]) -> set[str]:
    """:func:`write_event_lines` to ``path`` through a temporary file, renamed when complete."""
    directory = path.resolve().parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            runs = write_event_lines(events, handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return runs
