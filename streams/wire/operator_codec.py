"""Operator commands on the events topic (issue 43): :class:`OperatorCommand` as Avro
single-object messages with their own schema (``schemas/internal/OperatorCommand.avsc``), told
apart from gateways' events by the schema fingerprint in the header, as the control topic
tells watermarks from decisions. Gateways never write one, so it stays out of the clients'
schema and vectors; a worker too old to know the fingerprint dead-letters it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from streams.core.events import Envelope
from streams.core.operator_command import OperatorCommand
from streams.wire.errors import EncodeError, InvalidDatumError
from streams.wire.names import require_unicode
from streams.wire.schema_registry import SCHEMA_DIR, parse_schema_text
from streams.wire.single_object import (
    DEFAULT_MAX_MESSAGE_SIZE,
    HEADER_SIZE,
    MARKER,
    SchemaCodec,
)

COMMAND_SCHEMA = SCHEMA_DIR / "internal" / "OperatorCommand.avsc"
TEXT_FIELDS = ("run_id", "agent_id", "release_id", "reason", "released_by", "scope", "source")


@cache
def command_codec() -> SchemaCodec:
    text = COMMAND_SCHEMA.read_text(encoding="utf-8")
    return SchemaCodec("OperatorCommand", parse_schema_text(text))


def is_command(data: bytes | None) -> bool:
    """Whether a message carries the OperatorCommand schema's fingerprint."""
    if data is None or len(data) < HEADER_SIZE or not data.startswith(MARKER):
        return False
    return bytes(data[len(MARKER) : HEADER_SIZE]) == command_codec().schema.fingerprint


def encode_command(command: OperatorCommand, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes:
    if not isinstance(command, OperatorCommand):
        raise EncodeError(f"not an OperatorCommand: {type(command).__name__}")
    env = command.envelope
    datum: dict[str, Any] = {
        "run_id": env.run_id,
        "agent_id": env.agent_id,
        "session_id": env.session_id,
        "event_time": env.event_time,
        "command": command.command,
        "release_id": command.release_id,
        "calls": command.calls,
        "until": command.until,
        "reason": command.reason,
        "released_by": command.released_by,
        "scope": command.scope,
        "source": command.source,
    }
    return command_codec().encode(datum, max_size)


def decode_command(data: bytes, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> OperatorCommand:
    """Raises a :class:`streams.wire.errors.CodecError` for bad input."""
    datum = command_codec().decode(data, None, max_size)
    if not datum["run_id"]:
        raise InvalidDatumError("OperatorCommand without a run_id")
    require_unicode("OperatorCommand", datum, TEXT_FIELDS)
    envelope = Envelope(
        run_id=datum["run_id"],
        agent_id=datum["agent_id"],
        gateway_id="",
        seq=0,
        event_time=datum["event_time"],
        session_id=datum["session_id"],
    )
    return OperatorCommand(
        envelope=envelope,
        command=datum["command"],
        release_id=datum["release_id"],
        calls=datum["calls"],
        until=datum["until"],
        reason=datum["reason"],
        released_by=datum["released_by"],
        scope=datum["scope"],
        source=datum["source"],
    )
