"""Our records on the wire: events, decisions, run watermarks and dead letters, as Avro
single-object messages (the framing and schema resolution are single_object.py's).

Union branches are chosen by name on write (fastavro's ``(name, record)`` tuple notation), never
guessed from the values, and reported by name on read (``return_record_name``): an empty record
(RunStarted) or a ToolCall without ``tool_call_id`` would otherwise fit other branches too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, replace
from dataclasses import fields as dataclass_fields
from functools import cache
from typing import Any

from streams.core.events import EVENT_KINDS, Action, AgentEvent, Decision, Envelope
from streams.core.json_depth import load_json
from streams.wire.dead_letters import DeadLetterRecord, decode_dead_letter, encode_dead_letter
from streams.wire.errors import (
    BadMarkerError,
    CodecError,
    EncodeError,
    InvalidDatumError,
    InvalidSchemaError,
    MissingRunIdError,
    PayloadTooLargeError,
    SchemaMismatchError,
    TruncatedMessageError,
    UnknownSchemaError,
    one_line,
)
from streams.wire.names import ENVELOPE_TEXT, require_storable_names, require_unicode
from streams.wire.schema_registry import (
    SCHEMA_DIR,
    SchemaRegistry,
    default_registry,
    load_schemas,
    parsing_canonical_form,
    previous_schemas,
    schema_fingerprint,
    schema_json_for,
)
from streams.wire.single_object import (
    DEAD_LETTER_MAX_SIZE,
    DEFAULT_MAX_MESSAGE_SIZE,
    HEADER_SIZE,
    MARKER,
    SchemaCodec,
    event_schema_fingerprint,
    event_schema_json,
    own_codecs,
)

__all__ = [
    "DEAD_LETTER_MAX_SIZE",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MARKER",
    "SCHEMA_DIR",
    "BadMarkerError",
    "CodecError",
    "DeadLetterRecord",
    "EncodeError",
    "InvalidDatumError",
    "InvalidSchemaError",
    "MissingRunIdError",
    "PayloadTooLargeError",
    "RunWatermarks",
    "SchemaMismatchError",
    "SchemaRegistry",
    "TruncatedMessageError",
    "UnknownSchemaError",
    "control_messages",
    "decode_control",
    "decode_dead_letter",
    "decode_decision",
    "decode_event",
    "decode_watermarks",
    "default_registry",
    "encode_dead_letter",
    "encode_decision",
    "encode_event",
    "encode_watermark_chunks",
    "encode_watermarks",
    "event_from_dict_checked",
    "event_schema_fingerprint",
    "event_schema_json",
    "load_schemas",
    "parsing_canonical_form",
    "schema_fingerprint",
    "schema_json_for",
]

NAMESPACE = "loopguard"

# --------------------------------------------------------------------------------- events

_BODY_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclass_fields(cls) if f.name != "envelope")
    for cls in EVENT_KINDS.values()
}
_BODY_NAME: dict[type, str] = {cls: f"{NAMESPACE}.{cls.__name__}" for cls in EVENT_KINDS.values()}
_CLASS_BY_BODY_NAME: dict[str, type] = {name: cls for cls, name in _BODY_NAME.items()}
# A body field left out of a dict takes the event class's default (None where it has none,
# so the schema check names the missing field).
_BODY_DEFAULTS: dict[type, dict[str, Any]] = {
    cls: {
        f.name: None if f.default is MISSING else f.default
        for f in dataclass_fields(cls)
        if f.name != "envelope"
    }
    for cls in EVENT_KINDS.values()
}


def _event_datum(
    cls: type, head: Mapping[str, Any], body: dict[str, Any], check_names: bool
) -> dict[str, Any]:
    """The AgentEvent datum of an event's envelope values (``head``) and body; an empty run id
    and (with ``check_names``) names the worker would refuse fail here."""
    if not head["run_id"]:
        raise MissingRunIdError(cls.__name__)
    if check_names:
        try:
            require_storable_names(cls.__name__, head, body)
        except InvalidDatumError as exc:
            raise EncodeError(str(exc)) from None
    if "cost_usd" in body:
        _check_usage(cls.__name__, body)
    return {
        "run_id": head["run_id"],
        "agent_id": head["agent_id"],
        "gateway_id": head["gateway_id"],
        "seq": head["seq"],
        "event_time": head["event_time"],
        "body": (_BODY_NAME[cls], body),  # fastavro tuple notation: the union branch by name
        "session_id": head.get("session_id"),
        "chain_id": head.get("chain_id"),
    }


def _check_usage(record: str, body: Mapping[str, Any]) -> None:
    """Token counts and a cost are never negative, and a cost is a finite number."""
    for name in ("input_tokens", "output_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise EncodeError(f"{record}.{name} must be 0 or more, got {value}")
    cost = body.get("cost_usd")
    if isinstance(cost, int | float) and (not math.isfinite(cost) or cost < 0):
        raise EncodeError(f"{record}.cost_usd must be a finite number, 0 or more, got {cost}")


def encode_event(
    event: AgentEvent, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE, check_names: bool = True
) -> bytes:
    """Single-object Avro bytes for an event; raises :class:`CodecError` subclasses.

    Names the worker would refuse (NUL, over ``NAME_MAX_BYTES``) fail here already, so a
    gateway hears of it at once; ``check_names=False`` writes them anyway (for tests that
    feed the worker hostile input).
    """
    cls = type(event)
    if cls not in _BODY_NAME:
        raise EncodeError(f"not an AgentEvent: {cls.__name__}")
    envelope = event.envelope
    if not isinstance(envelope, Envelope):
        raise EncodeError(f"{cls.__name__}.envelope must be an Envelope")
    body = {name: getattr(event, name) for name in _BODY_FIELDS[cls]}
    head = {
        "run_id": envelope.run_id,
        "agent_id": envelope.agent_id,
        "gateway_id": envelope.gateway_id,
        "seq": envelope.seq,
        "event_time": envelope.event_time,
        "session_id": envelope.session_id,
        "chain_id": envelope.chain_id,
    }
    datum = _event_datum(cls, head, body, check_names)
    return own_codecs()["AgentEvent"].encode(datum, max_size, (datum["body"],))


def event_from_dict_checked(data: Mapping[str, Any]) -> AgentEvent:
    """An event from its flat ``event_to_dict`` form (export files), checked exactly as
    :func:`encode_event` checks what it writes: the AgentEvent schema's types and ranges, and
    names the worker would refuse. Raises a :class:`CodecError` naming the field."""
    cls = EVENT_KINDS.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise InvalidDatumError(f"unknown event kind {data.get('kind')!r}")
    missing = [name for name in ("run_id", "seq") if name not in data]
    if missing:
        raise InvalidDatumError(f"missing field {missing[0]!r}")
    agent_id, gateway_id = data.get("agent_id"), data.get("gateway_id")
    head = {
        "run_id": data["run_id"],
        "agent_id": "" if agent_id is None else agent_id,
        "gateway_id": "" if gateway_id is None else gateway_id,
        "seq": data["seq"],
        "event_time": data.get("event_time", 0),
        "session_id": data.get("session_id"),
        "chain_id": data.get("chain_id"),
    }
    body = {name: data.get(name, default) for name, default in _BODY_DEFAULTS[cls].items()}
    own_codecs()["AgentEvent"].explain(_event_datum(cls, head, body, check_names=True))
    return cls(Envelope(**head), **body)


def decode_event(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> AgentEvent:
    """Decode an event written with any registered AgentEvent schema version."""
    datum = own_codecs()["AgentEvent"].decode(data, registry, max_size)
    body = datum["body"]  # (reader branch name, values), from return_record_name
    cls = _CLASS_BY_BODY_NAME.get(body[0]) if isinstance(body, tuple) else None
    if cls is None:
        raise InvalidDatumError("AgentEvent body is not a known event kind")
    if not datum["run_id"]:
        raise MissingRunIdError(cls.__name__)
    envelope = Envelope(
        run_id=datum["run_id"],
        agent_id=datum["agent_id"],
        gateway_id=datum["gateway_id"],
        seq=datum["seq"],
        event_time=datum["event_time"],
        # absent (None) in events written before issue 17's session scope
        session_id=datum.get("session_id"),
        chain_id=datum.get("chain_id"),  # absent (None) before issue 28's agent cycles
    )
    values = body[1]
    fields = {name: values[name] for name in _BODY_FIELDS[cls]}
    require_unicode(cls.__name__, datum, ENVELOPE_TEXT)
    require_unicode(cls.__name__, fields, fields)
    require_storable_names(cls.__name__, datum, fields)
    return cls(envelope, **fields)


# ------------------------------------------------------------------------------ decisions

_DECISION_FIELDS = tuple(f.name for f in dataclass_fields(Decision) if f.name != "extra")
# A decision's extra values are the detectors' small facts; deeper JSON is refused on read
# (issue 40: 50,000 nested lists ended every worker). Their size is the message limit's.
MAX_EXTRA_DEPTH = 64


def _encode_extra(extra: Mapping[str, Any]) -> dict[str, str]:
    """Every value becomes JSON text (strings too), so decoding is exact and unambiguous."""
    if not isinstance(extra, Mapping):
        raise EncodeError(f"Decision.extra must be a mapping, got {type(extra).__name__}")
    out = {}
    for key, value in extra.items():
        if not isinstance(key, str):
            raise EncodeError(f"Decision.extra keys must be str, got {type(key).__name__}")
        try:
            out[key] = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise EncodeError(f"Decision.extra[{key!r}] is not JSON: {one_line(exc)}") from exc
    return out


def encode_decision(decision: Decision, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes:
    """Single-object Avro bytes for a Decision (control topic)."""
    if not isinstance(decision, Decision):
        raise EncodeError(f"not a Decision: {type(decision).__name__}")
    if not decision.run_id:
        raise MissingRunIdError("Decision")
    try:
        action = Action(decision.action)
    except ValueError as exc:
        raise EncodeError(f"Decision.action {decision.action!r} is not a known action") from exc
    datum: dict[str, Any] = {name: getattr(decision, name) for name in _DECISION_FIELDS}
    datum["action"] = action.value
    datum["extra"] = _encode_extra(decision.extra)
    if decision.action is not action:  # a plain string: the core's id reads the enum
        decision = replace(decision, action=action)
    datum["decision_id"] = decision.decision_id
    return own_codecs()["Decision"].encode(datum, max_size)


def decode_decision(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> Decision:
    """Decode a Decision; ``decision_id`` is derived, so the carried copy is not needed."""
    datum = own_codecs()["Decision"].decode(data, registry, max_size)
    if not datum["run_id"]:
        raise MissingRunIdError("Decision")
    try:
        extra = {key: load_json(text, MAX_EXTRA_DEPTH) for key, text in datum["extra"].items()}
    except (ValueError, RecursionError) as exc:  # NestedTooDeepError is a RecursionError
        raise InvalidDatumError(f"Decision.extra holds invalid JSON: {one_line(exc)}") from exc
    values = {name: datum[name] for name in _DECISION_FIELDS}
    values["action"] = Action(values["action"])
    return Decision(**values, extra=extra)


# ------------------------------------------------------------------------------ watermarks


@dataclass(frozen=True, slots=True, kw_only=True)
class RunWatermark:
    """The worker has processed a run up to ``seq``; follows that run's decisions on the
    control topic, so a gateway holding it holds every verdict up to ``seq``."""

    run_id: str
    agent_id: str
    gateway_id: str
    seq: int
    event_time: int  # of the event at seq, epoch milliseconds
    status: str = "active"  # active | ended | aborted
    event_count: int = 0
    # What the run's events reported of their model turns so far (issue 28); all 0 for a run
    # whose gateway reports no usage, whose watermarks then go out in the previous version.
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    loop_tokens: int = 0
    loop_cost_usd: float = 0.0
    loop_calls: int = 0
    saved_tokens: int = 0

    @property
    def has_usage(self) -> bool:
        return bool(self.input_tokens or self.output_tokens or self.cost_usd or self.saved_tokens)


_WATERMARK_FIELDS = tuple(f.name for f in dataclass_fields(RunWatermark))
# The version before the usage fields (schemas/previous/RunWatermark.v3.avsc): written for
# runs that reported no usage, so gateways from before issue 28 keep reading their runs'
# watermarks (they know no other version, and never look one up).
PREVIOUS_WATERMARK = "RunWatermark.v3"
_PREVIOUS_WATERMARK_FIELDS = _WATERMARK_FIELDS[: _WATERMARK_FIELDS.index("input_tokens")]


@cache
def _previous_watermark_codec() -> SchemaCodec:
    return SchemaCodec("RunWatermark", previous_schemas()[PREVIOUS_WATERMARK])


def _require_watermark(mark: RunWatermark) -> None:
    if not isinstance(mark, RunWatermark):
        raise EncodeError(f"not a RunWatermark: {type(mark).__name__}")
    if not mark.run_id:
        raise MissingRunIdError("RunWatermark")


def _watermark_from(datum: Mapping[str, Any]) -> RunWatermark:
    """A decoded RunWatermark datum (alone or in a RunWatermarks record) as the dataclass."""
    if not datum["run_id"]:
        raise MissingRunIdError("RunWatermark")
    return RunWatermark(**{name: datum[name] for name in _WATERMARK_FIELDS})


def encode_watermark(mark: RunWatermark, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes:
    """Single-object Avro bytes for a RunWatermark (control topic)."""
    _require_watermark(mark)
    if not mark.has_usage:
        return _previous_watermark_codec().encode(
            {n: getattr(mark, n) for n in _PREVIOUS_WATERMARK_FIELDS}, max_size
        )
    return own_codecs()["RunWatermark"].encode(
        {n: getattr(mark, n) for n in _WATERMARK_FIELDS}, max_size
    )


def decode_watermark(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> RunWatermark:
    return _watermark_from(own_codecs()["RunWatermark"].decode(data, registry, max_size))


@dataclass(frozen=True, slots=True)
class RunWatermarks:
    """Watermarks of every run a batch touched on one control partition, in one record
    (schemas/RunWatermarks.avsc): the worker's records no longer grow with its runs."""

    marks: tuple[RunWatermark, ...]


def encode_watermarks(
    marks: Sequence[RunWatermark], *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> bytes:
    """Single-object Avro bytes for a RunWatermarks record; :class:`PayloadTooLargeError`
    when the marks do not fit ``max_size`` (split them: :func:`encode_watermark_chunks`)."""
    for mark in marks:
        _require_watermark(mark)
    fields = _WATERMARK_FIELDS
    datum = {"watermarks": [{n: getattr(m, n) for n in fields} for m in marks]}
    return own_codecs()["RunWatermarks"].encode(datum, max_size)


def encode_watermark_chunks(
    marks: Sequence[RunWatermark], *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> list[bytes]:
    """``marks`` as few RunWatermarks records as fit ``max_size`` each (halved until they
    do; one mark too large for a record of its own raises :class:`PayloadTooLargeError`)."""
    try:
        return [encode_watermarks(marks, max_size=max_size)]
    except PayloadTooLargeError:
        if len(marks) < 2:
            raise
    half = len(marks) // 2
    return [
        *encode_watermark_chunks(marks[:half], max_size=max_size),
        *encode_watermark_chunks(marks[half:], max_size=max_size),
    ]


def decode_watermarks(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> RunWatermarks:
    datum = own_codecs()["RunWatermarks"].decode(data, registry, max_size)
    return RunWatermarks(tuple(_watermark_from(mark) for mark in datum["watermarks"]))


def decode_control(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> Decision | RunWatermark | RunWatermarks:
    """A control-topic message: a run's watermark or a batch's watermarks when it carries
    their schema's fingerprint, otherwise a Decision (ours or a registered evolution)."""
    is_bytes = isinstance(data, bytes | bytearray | memoryview)  # a tombstone is None
    if is_bytes:
        fingerprint = data[len(MARKER) : HEADER_SIZE]
        if fingerprint == own_codecs()["RunWatermarks"].schema.fingerprint:
            return decode_watermarks(data, registry, max_size=max_size)
        if fingerprint in _watermark_fingerprints():
            return decode_watermark(data, registry, max_size=max_size)
    return decode_decision(data, registry, max_size=max_size)


def control_messages(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> tuple[Decision | RunWatermark, ...]:
    """A control-topic message as the decisions and run watermarks it holds (a
    RunWatermarks record holds several)."""
    message = decode_control(data, registry, max_size=max_size)
    return message.marks if isinstance(message, RunWatermarks) else (message,)


@cache
def _watermark_fingerprints() -> frozenset[bytes]:
    return frozenset(
        (
            own_codecs()["RunWatermark"].schema.fingerprint,
            _previous_watermark_codec().schema.fingerprint,
        )
    )
