"""An operator's command on the events topic (issue 43) carries a schema of ours: the worker
never looks its fingerprint up on the schemas topic, while an unknown gateway schema is."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from streams.core.events import Envelope
from streams.core.operator_command import OperatorCommand
from streams.wire.operator_codec import encode_command
from streams.wire.schema_registry import default_registry
from streams.wire.single_object import MARKER
from streams.worker.writer_schemas import resolve_writer_schemas


class SchemaTopic:
    def __init__(self) -> None:
        self.resolved: list[bytes] = []

    def known_missing(self, fingerprint: bytes) -> bool:
        return False

    def resolve(self, fingerprint: bytes, producer: str) -> None:
        self.resolved.append(fingerprint)


def test_a_command_is_never_looked_up_and_an_unknown_schema_is() -> None:
    topic = SchemaTopic()
    parts = SimpleNamespace(registry=default_registry(), schema_topic=topic)
    command = encode_command(
        OperatorCommand(Envelope("run-1", "a", "", 0, 1), "release", "r-1", calls=3)
    )
    foreign = MARKER + b"\x01" * 8 + b"\x00"
    asyncio.run(resolve_writer_schemas(parts, [command, foreign]))  # type: ignore[arg-type]
    assert topic.resolved == [b"\x01" * 8]
