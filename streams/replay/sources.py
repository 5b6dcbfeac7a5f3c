"""Where replayed events come from: an export file or the events topic, filtered by a selection,
with read statistics (progress lines, undecodable messages) kept on the way.

Both sources can be read again (for the events at divergences); the topic is read without a
consumer group (:mod:`streams.kafka.reader`), so the workers never notice.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from streams.core.events import AgentEvent
from streams.replay.event_file import parse_event_line

MAX_SAMPLES = 5


class SourceError(Exception):
    """An event source cannot be read as asked (a missing file, a bad line): bad input."""


@dataclass(frozen=True)
class Selection:
    """Which events count: some runs (all when empty) and every run of some sessions, an
    event-time range."""

    runs: frozenset[str] = frozenset()
    since_ms: int | None = None
    until_ms: int | None = None
    sessions: frozenset[str] = frozenset()

    def wants(self, event: AgentEvent) -> bool:
        env = event.envelope
        if self.runs and env.run_id not in self.runs and env.session_id not in self.sessions:
            return False
        if self.since_ms is not None and env.event_time < self.since_ms:
            return False
        return self.until_ms is None or env.event_time < self.until_ms


@dataclass
class ReadStats:
    """What a read saw: messages, selected events, undecodable messages (with samples)."""

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


def progress_line(verb: str, stats: ReadStats, reader: Any, extra: str = "") -> str:
    done = ""
    if reader is not None and reader.total:
        done = f" (~{min(100, stats.messages * 100 // reader.total)}% of the slice)"
    return (
        f"{verb}: {stats.messages} messages read{done}, {stats.selected} events selected, "
        f"{stats.undecodable} undecodable{extra}"
    )


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


def open_topic_reader(
    settings: Any, from_offsets: dict[int | None, int], since_ms: int | None
) -> Any:
    """A group-less reader of the events topic, its slice fixed now (see TopicReader)."""
    # Deferred, as the codec below: kafka-python and fastavro load only when a topic is read.
    from streams.kafka.reader import TopicReader

    return TopicReader(
        settings.bootstrap_servers,
        settings.topics.events,
        kafka_options=settings.kafka_client_options(),
        from_offsets=from_offsets,
        since_ms=since_ms,
    ).open()


class TopicSource:
    """The events topic, between the offsets fixed when the source opens."""

    def __init__(self, reader: Any, max_message_bytes: int) -> None:
        self.reader = reader
        self.max_message_bytes = max_message_bytes

    def describe(self) -> str:
        return f"topic {self.reader.topic} ({len(self.reader.slices)} partitions)"

    def events(self, stats: ReadStats, selection: Selection) -> Iterator[AgentEvent]:
        from streams.wire.avro import CodecError, decode_event
        from streams.wire.operator_codec import decode_command, is_command

        for record in self.reader.records():
            stats.tick()
            where = f"partition {record.partition} offset {record.offset}"
            if not record.value:
                stats.bad(where, "empty message")
                continue
            # an operator's release or abort (issue 43) is replayed in its place too
            decode = decode_command if is_command(record.value) else decode_event
            try:
                event = decode(record.value, max_size=self.max_message_bytes)
            except CodecError as exc:
                stats.bad(where, str(exc))
                continue
            if selection.wants(event):
                stats.selected += 1
                yield event
