"""The incidents topic's records (issue 28): :class:`streams.core.incidents.Incident` as Avro
single-object messages, and the incident-signals topic's JSON.

The Incident schema lives in ``schemas/internal/``: a worker-to-worker and worker-to-audit
record that gateways never read, so it stays out of the clients' cross-language vectors.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from streams.core.incidents import Incident, Signal
from streams.core.json_depth import load_json
from streams.wire.errors import EncodeError, InvalidDatumError, PayloadTooLargeError, one_line
from streams.wire.schema_registry import SCHEMA_DIR, parse_schema_text
from streams.wire.single_object import DEFAULT_MAX_MESSAGE_SIZE, SchemaCodec

INCIDENT_SCHEMA = SCHEMA_DIR / "internal" / "Incident.avsc"
MAX_SIGNAL_DEPTH = 8  # a signal is a flat object with a few short lists


@cache
def incident_codec() -> SchemaCodec:
    return SchemaCodec("Incident", parse_schema_text(INCIDENT_SCHEMA.read_text(encoding="utf-8")))


def encode_incident(incident: Incident, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes:
    if not isinstance(incident, Incident):
        raise EncodeError(f"not an Incident: {type(incident).__name__}")
    return incident_codec().encode(incident.to_dict(), max_size)


def decode_incident(data: bytes, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> Incident:
    datum = incident_codec().decode(data, None, max_size)
    try:
        return Incident.from_dict(datum)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidDatumError(f"not an incident: {one_line(exc)}") from exc


def encode_signal(signal: Signal) -> bytes:
    """A signal on the internal incident-signals topic: compact JSON (only workers read it)."""
    return json.dumps(signal.to_dict(), separators=(",", ":"), ensure_ascii=False).encode()


def decode_signal(data: bytes, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> Signal:
    """A signal; :class:`InvalidDatumError` for anything else (over ``max_size`` bytes, JSON
    nested deeper than a signal's few levels, missing or mistyped fields)."""
    if len(data) > max_size:
        raise PayloadTooLargeError(len(data), max_size)
    try:
        values: Any = load_json(data, MAX_SIGNAL_DEPTH)
        return Signal.from_dict(values)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise InvalidDatumError(f"not an incident signal: {one_line(exc)}") from exc
