"""The gateway an events-topic message says it comes from, read without its writer schema.

An event whose writer schema is unknown cannot be decoded until the schema is looked up,
yet the lookups must be shared out per producer (issue 40: a flood of unknown ids held a
looping run's abort for 21 s). Every AgentEvent version begins with the same three strings
(``run_id``, ``agent_id``, ``gateway_id``: schemas/AgentEvent.avsc and its previous versions),
so the third is read straight from the bytes. It is a claim, not an identity: a message that
lies about it only spends the quota of the gateway it names (and the fleet's, which bounds
them all).
"""

from __future__ import annotations

from streams.wire.names import NAME_MAX_BYTES
from streams.wire.single_object import HEADER_SIZE, MARKER

UNKNOWN_PRODUCER = ""  # not framed as an event, or its envelope unreadable
_ENVELOPE_STRINGS = 3  # run_id, agent_id, gateway_id


def claimed_gateway(value: bytes | None) -> str:
    """The ``gateway_id`` an event's bytes carry, or UNKNOWN_PRODUCER when they carry none
    that reads as one (a name over NAME_MAX_BYTES, bad UTF-8, bytes cut short)."""
    if value is None or not value.startswith(MARKER):
        return UNKNOWN_PRODUCER
    at, text = HEADER_SIZE, UNKNOWN_PRODUCER
    for _ in range(_ENVELOPE_STRINGS):
        length, at = _read_long(value, at)
        if length < 0 or length > NAME_MAX_BYTES or at + length > len(value):
            return UNKNOWN_PRODUCER
        try:
            text = value[at : at + length].decode("utf-8")
        except UnicodeDecodeError:
            return UNKNOWN_PRODUCER
        at += length
    return text


def _read_long(data: bytes, at: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at ``at``: (value, next position); (-1, at) if cut
    short or longer than a long can be."""
    shift = result = 0
    for position in range(at, min(at + 10, len(data))):
        byte = data[position]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position + 1
        shift += 7
    return -1, at
