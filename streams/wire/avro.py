"""Avro single-object encoding for events, decisions and dead letters, on fastavro.

Every message is ``C3 01`` + the 8-byte CRC-64-AVRO fingerprint of the writer schema's Parsing
Canonical Form + the binary datum (the Avro spec's single-object encoding; fastavro has no helper
for the framing, so it is done here). The fingerprint lets a worker decode messages from a gateway
running a newer schema (Avro schema resolution onto the worker's own reader schema, by fastavro)
without a schema-registry service: it only needs the writer schema registered in a
:class:`SchemaRegistry` (see :mod:`streams.wire.schema_registry`).

Union branches are chosen by name on write (fastavro's ``(name, record)`` tuple notation), never
guessed from the values, and reported by name on read (``return_record_name``): an empty record
(RunStarted) or a ToolCall without ``tool_call_id`` would otherwise fit other branches too.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, replace
from dataclasses import fields as dataclass_fields
from functools import cache
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.validation import ValidationError, validate

from streams.core.events import EVENT_KINDS, Action, AgentEvent, Decision, Envelope
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
from streams.wire.schema_registry import (
    SCHEMA_DIR,
    ParsedSchema,
    SchemaRegistry,
    default_registry,
    load_schemas,
    own_schemas,
    parsing_canonical_form,
    schema_fingerprint,
    schema_json_for,
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
    "SchemaMismatchError",
    "SchemaRegistry",
    "TruncatedMessageError",
    "UnknownSchemaError",
    "decode_dead_letter",
    "decode_decision",
    "decode_event",
    "default_registry",
    "encode_dead_letter",
    "encode_decision",
    "encode_event",
    "event_from_dict_checked",
    "event_schema_fingerprint",
    "event_schema_json",
    "load_schemas",
    "parsing_canonical_form",
    "schema_fingerprint",
    "schema_json_for",
]

NAMESPACE = "loopguard"
MARKER = b"\xc3\x01"
HEADER_SIZE = len(MARKER) + 8
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024
# A dead letter wraps a payload that may itself have hit the event limit, plus the reason.
DEAD_LETTER_MAX_SIZE = 2 * DEFAULT_MAX_MESSAGE_SIZE

_INT_RANGES = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}
# How fastavro validation errors describe the expected type, in Python terms.
_WANTED = {
    "null": "None",
    "boolean": "a bool",
    "int": "an int in the 32-bit range",
    "long": "an int in the 64-bit range",
    "float": "a float",
    "double": "a float",
    "bytes": "bytes",
    "string": "a str",
}

_IntFields = tuple[tuple[str, int, int], ...]


# ------------------------------------------------------------------------ our own schemas


def _int_fields(record: Mapping[str, Any]) -> _IntFields:
    """(name, min, max) of a record's plain int/long fields.

    fastavro's writer silently writes ``True`` as 1 and truncates ``1.5`` to 1 for these, so
    they are checked before writing; everything else it rejects itself (and the error is then
    explained with fastavro's validator).
    """
    return tuple(
        (f["name"], *_INT_RANGES[f["type"]])
        for f in record.get("fields", ())
        if isinstance(f["type"], str) and f["type"] in _INT_RANGES
    )


def _ints_ok(fields: _IntFields, values: Mapping[str, Any]) -> bool:
    for name, low, high in fields:
        value = values.get(name)
        if type(value) is not int or not low <= value <= high:
            return False
    return True


def _describe(schema: Any) -> str:
    if isinstance(schema, str):
        return _WANTED.get(schema, f"a {schema}")
    if isinstance(schema, dict):
        if schema.get("type") == "enum":
            return f"one of {schema['symbols']}"
        return f"a {schema.get('name') or schema.get('type')}"
    return "a union member"


def _validation_message(record: str, errors: Iterable[Any]) -> str:
    """``Record.field must be <type>, got <value>`` from fastavro's first failing field."""
    errors = list(errors)
    first = errors[0]
    wanted = " or ".join(
        dict.fromkeys(_describe(e.schema) for e in errors if e.field == first.field)
    )
    label = ".".join(str(first.field).split(".")[-2:]) or record  # drop the namespace
    value = first.datum
    return f"{label} must be {wanted}, got {type(value).__name__} {value!r:.60}"


class _OwnSchema:
    """One of our schemas with its message header, pre-write checks and fastavro plumbing."""

    __slots__ = ("header", "int_fields", "name", "schema")

    def __init__(self, name: str, schema: ParsedSchema) -> None:
        self.name = name
        self.schema = schema
        self.header = MARKER + schema.fingerprint
        self.int_fields = {
            fullname: _int_fields(named)
            for fullname, named in schema.named.items()
            if named.get("type") == "record"
        }

    def encode(
        self,
        datum: Mapping[str, Any],
        max_size: int,
        parts: Iterable[tuple[str, Mapping[str, Any]]] = (),
    ) -> bytes:
        """Header + datum. ``parts`` are nested (record name, values) whose ints to pre-check."""
        ints = self.int_fields
        if not _ints_ok(ints[self.schema.fullname], datum) or not all(
            _ints_ok(ints[name], values) for name, values in parts
        ):
            self.explain(datum)
        out = io.BytesIO()
        out.write(self.header)
        try:
            schemaless_writer(out, self.schema.parsed, datum)
        except Exception as exc:  # boundary: fastavro/unicode errors must surface as CodecError
            self.explain(datum)
            raise EncodeError(f"cannot encode {self.name}: {one_line(exc)}") from exc
        size = out.tell()
        if size > max_size:
            raise PayloadTooLargeError(size, max_size)
        return out.getvalue()

    def explain(self, datum: Mapping[str, Any]) -> None:
        """Raise :class:`EncodeError` naming the first field fastavro's validator rejects."""
        try:
            validate(datum, self.schema.parsed, raise_errors=True)
        except ValidationError as exc:
            raise EncodeError(_validation_message(self.name, exc.errors)) from exc
        except Exception as exc:  # boundary: e.g. a non-mapping record
            raise EncodeError(f"cannot encode {self.name}: {one_line(exc)}") from exc

    def decode(
        self, data: bytes | bytearray | memoryview, registry: SchemaRegistry | None, max_size: int
    ) -> dict[str, Any]:
        """Check the framing, then read the datum (resolving a foreign writer schema onto ours)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidDatumError(f"expected bytes, got {type(data).__name__}")
        size = len(data)
        if size > max_size:
            raise PayloadTooLargeError(size, max_size)
        head = bytes(data[:2])
        if head != MARKER[: len(head)]:
            raise BadMarkerError(
                f"bad marker {head.hex()}: not an Avro single-object message (expected c301)"
            )
        if size < HEADER_SIZE:
            raise TruncatedMessageError(f"message is {size} bytes, shorter than the 10-byte header")
        buf = data if isinstance(data, bytes) else bytes(data)
        fingerprint = buf[2:HEADER_SIZE]
        if fingerprint == self.schema.fingerprint:
            writer, reader = self.schema, None
        else:
            writer = (registry or default_registry()).writer_for(fingerprint, self.schema)
            reader = self.schema
        stream = io.BytesIO(buf)
        stream.seek(HEADER_SIZE)
        try:
            datum = _read(stream, writer, reader)
        except SchemaResolutionError as exc:
            raise self._mismatch(writer, exc) from exc
        except Exception as exc:  # boundary: whatever fastavro raises on bad bytes
            raise self._read_error(buf, writer, reader, exc) from exc
        end = stream.tell()
        if end != size:
            raise InvalidDatumError(f"{size - end} trailing bytes after the {self.name} datum")
        if not _ints_ok(self.int_fields[self.schema.fullname], datum):
            # fastavro reads an Avro int as a 64-bit long without a range check.
            raise InvalidDatumError(f"{self.name} datum has an int field outside its range")
        return datum

    def _mismatch(self, writer: ParsedSchema, exc: Exception) -> SchemaMismatchError:
        unknown = sorted(set(writer.named) - set(self.schema.named))
        why = f"writer types unknown to this reader: {', '.join(unknown)}" if unknown else ""
        return SchemaMismatchError(
            f"cannot resolve writer schema {writer.fingerprint.hex()} onto {self.name}: "
            + (why or one_line(exc))
        )

    def _read_error(
        self, buf: bytes, writer: ParsedSchema, reader: ParsedSchema | None, exc: Exception
    ) -> CodecError:
        """Truncated if fastavro asked for bytes past the end, else an invalid datum.

        Reads again through :class:`_ReadProbe` (errors are rare; this keeps the hot path
        free of a Python-level ``read``) to see whether a read came up short.
        """
        probe = _ReadProbe(buf)
        probe.seek(HEADER_SIZE)
        with contextlib.suppress(Exception):  # it fails again; only the probe's record counts
            _read(probe, writer, reader)
        if probe.anomaly == "short":
            return TruncatedMessageError(f"{self.name} message ends inside the datum")
        if isinstance(exc, IndexError) and probe.anomaly is None:
            # fastavro indexes the union branch list or the enum symbols with the wire index.
            return InvalidDatumError(
                f"invalid {self.name} datum: union branch index or enum symbol index out of range"
            )
        return InvalidDatumError(f"invalid {self.name} datum: {one_line(exc)}")


def _read(stream: io.BytesIO, writer: ParsedSchema, reader: ParsedSchema | None) -> Any:
    return schemaless_reader(
        stream,
        writer.parsed,
        None if reader is None else reader.parsed,
        return_record_name=True,
    )


class _ReadProbe(io.BytesIO):
    """Records the first read that asked for a negative length or got fewer bytes than asked."""

    anomaly: str | None = None

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        if self.anomaly is None:
            if size is None or size < 0:
                self.anomaly = "negative length"
            elif len(data) < size:
                self.anomaly = "short"
        return data


@cache
def _own() -> dict[str, _OwnSchema]:
    return {name: _OwnSchema(name, schema) for name, schema in own_schemas().items()}


def event_schema_json() -> str:
    """Our AgentEvent writer schema as compact JSON, for gateways to publish to a schemas topic."""
    return _own()["AgentEvent"].schema.json_text


def event_schema_fingerprint() -> bytes:
    """Fingerprint our encoder stamps on every event."""
    return _own()["AgentEvent"].schema.fingerprint


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
            _require_storable_names(cls.__name__, head, body)
        except InvalidDatumError as exc:
            raise EncodeError(str(exc)) from None
    return {
        "run_id": head["run_id"],
        "agent_id": head["agent_id"],
        "gateway_id": head["gateway_id"],
        "seq": head["seq"],
        "event_time": head["event_time"],
        "body": (_BODY_NAME[cls], body),  # fastavro tuple notation: the union branch by name
        "session_id": head.get("session_id"),
    }


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
    }
    datum = _event_datum(cls, head, body, check_names)
    return _own()["AgentEvent"].encode(datum, max_size, (datum["body"],))


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
    }
    body = {name: data.get(name, default) for name, default in _BODY_DEFAULTS[cls].items()}
    _own()["AgentEvent"].explain(_event_datum(cls, head, body, check_names=True))
    return cls(Envelope(**head), **body)


def decode_event(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> AgentEvent:
    """Decode an event written with any registered AgentEvent schema version."""
    datum = _own()["AgentEvent"].decode(data, registry, max_size)
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
    )
    values = body[1]
    fields = {name: values[name] for name in _BODY_FIELDS[cls]}
    _require_unicode(cls.__name__, datum, _ENVELOPE_TEXT)
    _require_unicode(cls.__name__, fields, fields)
    _require_storable_names(cls.__name__, datum, fields)
    return cls(envelope, **fields)


# Names that become keys, indexed SQL columns and decision text: PostgreSQL refuses NUL in
# text and cannot index a value over ~2.7 KB, so a hostile id could stall the audit trail.
NAME_MAX_BYTES = 1024
_NAME_FIELDS = ("run_id", "agent_id", "gateway_id", "tool_name", "session_id")
_ENVELOPE_TEXT = ("run_id", "agent_id", "gateway_id", "session_id")


def _require_storable_names(record: str, *sources: Mapping[str, Any]) -> None:
    for values in sources:
        for name in _NAME_FIELDS:
            value = values.get(name)
            if not isinstance(value, str):
                continue
            if "\x00" in value:
                raise InvalidDatumError(f"{record}.{name} contains a NUL character")
            if len(value) * 4 <= NAME_MAX_BYTES:
                continue  # at most 4 UTF-8 bytes a character: fits without encoding it
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > NAME_MAX_BYTES:
                raise InvalidDatumError(
                    f"{record}.{name} is {size} bytes long, over the {NAME_MAX_BYTES}-byte limit"
                )


def _require_unicode(record: str, values: Mapping[str, Any], names: Iterable[str]) -> None:
    """Strings must be real Unicode: lone surrogates (from invalid UTF-8) could not be
    written back out to the changelog, the control topic or SQL, so refuse them here."""
    for name in names:
        value = values[name]
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidDatumError(
                    f"{record}.{name} is not valid UTF-8 text (lone surrogate)"
                ) from None


# ------------------------------------------------------------------------------ decisions

_DECISION_FIELDS = tuple(f.name for f in dataclass_fields(Decision) if f.name != "extra")


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
        except (TypeError, ValueError) as exc:
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
    return _own()["Decision"].encode(datum, max_size)


def decode_decision(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> Decision:
    """Decode a Decision; ``decision_id`` is derived, so the carried copy is not needed."""
    datum = _own()["Decision"].decode(data, registry, max_size)
    if not datum["run_id"]:
        raise MissingRunIdError("Decision")
    try:
        extra = {key: json.loads(text) for key, text in datum["extra"].items()}
    except ValueError as exc:
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


_WATERMARK_FIELDS = tuple(f.name for f in dataclass_fields(RunWatermark))


def encode_watermark(mark: RunWatermark, *, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes:
    """Single-object Avro bytes for a RunWatermark (control topic)."""
    if not isinstance(mark, RunWatermark):
        raise EncodeError(f"not a RunWatermark: {type(mark).__name__}")
    if not mark.run_id:
        raise MissingRunIdError("RunWatermark")
    return _own()["RunWatermark"].encode({n: getattr(mark, n) for n in _WATERMARK_FIELDS}, max_size)


def decode_watermark(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> RunWatermark:
    datum = _own()["RunWatermark"].decode(data, registry, max_size)
    if not datum["run_id"]:
        raise MissingRunIdError("RunWatermark")
    return RunWatermark(**{name: datum[name] for name in _WATERMARK_FIELDS})


def decode_control(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> Decision | RunWatermark:
    """A control-topic message: a watermark when it carries the watermark schema's
    fingerprint, otherwise a Decision (ours or a registered evolution of it)."""
    is_bytes = isinstance(data, bytes | bytearray | memoryview)  # a tombstone is None
    if is_bytes and data[len(MARKER) : HEADER_SIZE] == _own()["RunWatermark"].schema.fingerprint:
        return decode_watermark(data, registry, max_size=max_size)
    return decode_decision(data, registry, max_size=max_size)


# ---------------------------------------------------------------------------- dead letters


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterRecord:
    """A message a worker gave up on, kept byte for byte with the reason, for replay.

    The wire form of the ``DeadLetter`` Avro record (the ORM row is
    :class:`streams.audit.models.DeadLetter`).
    """

    source_topic: str
    partition: int
    offset: int
    error: str
    payload: bytes
    event_time: int  # when it was dead-lettered, epoch milliseconds
    key: bytes | None = None


_DEAD_LETTER_FIELDS = tuple(f.name for f in dataclass_fields(DeadLetterRecord))


def encode_dead_letter(letter: DeadLetterRecord, *, max_size: int = DEAD_LETTER_MAX_SIZE) -> bytes:
    """Single-object Avro bytes for a dead letter."""
    if not isinstance(letter, DeadLetterRecord):
        raise EncodeError(f"not a DeadLetterRecord: {type(letter).__name__}")
    datum = {name: getattr(letter, name) for name in _DEAD_LETTER_FIELDS}
    for name in ("payload", "key"):
        if isinstance(datum[name], bytearray | memoryview):
            datum[name] = bytes(datum[name])
    return _own()["DeadLetter"].encode(datum, max_size)


def decode_dead_letter(
    data: bytes,
    registry: SchemaRegistry | None = None,
    *,
    max_size: int = DEAD_LETTER_MAX_SIZE,
) -> DeadLetterRecord:
    """Decode a dead letter (larger default limit: it wraps a possibly oversized payload)."""
    datum = _own()["DeadLetter"].decode(data, registry, max_size)
    return DeadLetterRecord(**{name: datum[name] for name in _DEAD_LETTER_FIELDS})
