"""Errors raised by the Avro codec (:mod:`streams.wire.avro`) and its schema registry.

Every encode/decode failure is a :class:`CodecError`, so a worker can dead-letter a message with
one ``except``; messages are one line, short enough for a dead-letter ``error`` field.
"""

from __future__ import annotations

import re

__all__ = [
    "BadMarkerError",
    "CodecError",
    "EncodeError",
    "InvalidDatumError",
    "InvalidSchemaError",
    "MissingRunIdError",
    "PayloadTooLargeError",
    "SchemaMismatchError",
    "TruncatedMessageError",
    "UnknownSchemaError",
    "one_line",
]

_ERROR_TEXT_LIMIT = 200


class CodecError(ValueError):
    """Base for every encode/decode failure, so callers can dead-letter with one ``except``."""

    @property
    def kind(self) -> str:
        """A short label for this kind of bad input, as the worker's metrics count it: the
        class name in snake case without ``Error`` (``PayloadTooLargeError`` ->
        ``payload_too_large``)."""
        name = type(self).__name__
        return re.sub(r"(?<!^)(?=[A-Z])", "_", name.removesuffix("Error") or name).lower()


class BadMarkerError(CodecError):
    """The message does not start with the single-object marker ``C3 01``."""


class TruncatedMessageError(CodecError):
    """The message ends inside the header or the datum."""


class PayloadTooLargeError(CodecError):
    """The message exceeds the configured size limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message is {size} bytes, over the {limit}-byte limit")
        self.size = size
        self.limit = limit


class UnknownSchemaError(CodecError):
    """The writer-schema fingerprint is not registered."""

    def __init__(self, fingerprint: bytes) -> None:
        super().__init__(
            f"unknown writer schema fingerprint {fingerprint.hex()}; "
            "register the writer schema before decoding its messages"
        )
        self.fingerprint = fingerprint


class InvalidSchemaError(CodecError):
    """A schema handed to :meth:`SchemaRegistry.register` is not valid Avro."""


class SchemaMismatchError(CodecError):
    """The writer schema cannot be resolved onto the reader schema."""


class InvalidDatumError(CodecError):
    """The datum is malformed or holds values the schema (or the event model) rejects."""


class MissingRunIdError(InvalidDatumError):
    """run_id is empty: the message cannot be partitioned or attributed to a run."""

    def __init__(self, what: str = "event") -> None:
        super().__init__(f"missing run_id: {what} has an empty run_id")


class EncodeError(CodecError):
    """An object cannot be encoded (wrong type, out-of-range number, non-JSON extra, ...)."""


def one_line(exc: BaseException) -> str:
    """Short single-line rendering: library messages can embed whole schemas or JSON lists."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > _ERROR_TEXT_LIMIT:
        text = text[: _ERROR_TEXT_LIMIT - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
