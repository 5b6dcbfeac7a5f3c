"""Canonical JSON: the one byte form a value is hashed in, whatever gateway sent it.

Key order never matters (sorted keys), numbers are held as JavaScript holds them (``1`` and
``1.0`` are one value, as for a TypeScript gateway), and the standard library's fallback
path refuses nesting past a fixed depth instead of depending on the caller's stack.
Also JavaScript's ``trim``, which the outcome rules (outcomes.py) follow.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson

from streams.core.json_depth import (
    MAX_FALLBACK_DEPTH,
    NestedTooDeepError,
    load_json,
    value_depth,
    with_headroom,
)

# A payload that was not sent at all (distinct from JSON null).
MISSING = object()
_sha256 = hashlib.sha256


# -- numbers as JavaScript holds them ---------------------------------------------------
#
# A TypeScript gateway parses JSON numbers into doubles: ``1`` and ``1.0`` are one value,
# ``12345678901234567890`` is the double nearest to it (``12345678901234567000``), NaN and
# infinities are written ``null``. A Python gateway sends the same values as Python writes
# them (``1.0``, every digit of a big integer). So canonical JSON holds every number as the
# double JavaScript would: the same call hashes the same whichever gateway sent it.
#
# orjson writes a double in its shortest round-trip form, so equal doubles already give
# equal bytes, except where Python keeps two types: an integral float (written ``1.0``)
# against an int (``1``), and an int beyond 2**53 against its double. The fast path
# serialises with orjson refusing such ints, and takes the slow path (numbers canonicalised,
# then serialised again) only when the output holds ``.0``: the common payload pays one
# substring test, not a walk over its values.

_SAFE_INTEGER = 2**53
_INFINITY = float("inf")
_SORT = orjson.OPT_SORT_KEYS
_SORT_STRICT = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER  # ints beyond 2**53 raise


def js_number(value: Any) -> Any:
    """A JSON number (int or float) as the double JavaScript holds: an int when integral
    and exactly held (|n| <= 2**53), None when not finite (JSON.stringify writes null),
    else a float."""
    number: float
    if type(value) is int:
        if -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
            return value
        try:
            number = float(value)  # the nearest double, as JSON.parse reads it
        except OverflowError:  # beyond any double: JavaScript reads Infinity
            return None
    else:
        number = value
    if number != number or number == _INFINITY or number == -_INFINITY:
        return None
    if number.is_integer() and -_SAFE_INTEGER <= number <= _SAFE_INTEGER:
        return int(number)
    return number


def is_number(value: Any) -> bool:
    kind = type(value)
    return kind is int or kind is float


def canonical_numbers(value: Any) -> Any:
    """A copy of ``value`` with every number as :func:`js_number` gives it (iterative: any
    depth; ``value`` itself is left as it is)."""
    kind = type(value)
    if kind is int or kind is float:
        return js_number(value)
    if kind is not dict and kind is not list:
        return value
    root: Any = {} if kind is dict else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        if type(source) is dict:
            for key, item in source.items():
                kind = type(item)
                if kind is dict or kind is list:
                    child: Any = {} if kind is dict else []
                    stack.append((item, child))
                    target[key] = child
                else:
                    target[key] = js_number(item) if kind is int or kind is float else item
        else:
            for item in source:
                kind = type(item)
                if kind is dict or kind is list:
                    child = {} if kind is dict else []
                    stack.append((item, child))
                    target.append(child)
                else:
                    target.append(js_number(item) if kind is int or kind is float else item)
    return root


# JavaScript's ``undefined`` where a reference rule hashes a field without a ``?? null``:
# stable stringify writes it as the bare word, distinct from ``null`` and from any string.
UNDEFINED = orjson.Fragment(b"undefined")
_UNDEFINED_FALLBACK = "\x00undefined"  # the standard library path cannot write bare words


def _fallback_default(value: Any) -> Any:
    if value is UNDEFINED:
        return _UNDEFINED_FALLBACK
    return str(value)


def canonical_json(value: Any) -> bytes:
    """Key-order independent, whitespace free UTF-8 JSON, numbers as JavaScript holds them.

    orjson does the common case several times faster than the standard library; values it
    refuses (lone surrogates, non-string keys, nesting past 254) take the standard library's
    path, so every input still has exactly one canonical form; past ``MAX_FALLBACK_DEPTH``
    that path raises :class:`NestedTooDeepError`.
    """
    try:
        data = orjson.dumps(value, option=_SORT_STRICT)
    except (TypeError, orjson.JSONEncodeError):
        pass  # an integer beyond 2**53, or a value orjson refuses
    else:
        if b".0" not in data:  # no integral float below 2**53 (orjson writes those "N.0")
            return data
    value = canonical_numbers(value)
    try:
        return orjson.dumps(value, option=_SORT)
    except (TypeError, orjson.JSONEncodeError):
        if value_depth(value) > MAX_FALLBACK_DEPTH:
            raise NestedTooDeepError(f"JSON nested deeper than {MAX_FALLBACK_DEPTH}") from None
        text = with_headroom(
            json.dumps,
            value,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            default=_fallback_default,
        )
        return text.encode("utf-8", "surrogatepass")


def digest(value: Any) -> str:
    try:  # canonical_json's fast path inlined: this runs several times per event
        data = orjson.dumps(value, option=_SORT_STRICT)
    except (TypeError, orjson.JSONEncodeError):
        data = canonical_json(value)
    else:
        if b".0" in data:
            data = canonical_json(value)
    return _sha256(data).hexdigest()


def parse_json(text: str | None) -> Any:
    """Decode a JSON payload; text that is not JSON is hashed as the plain string it is."""
    if text is None:
        return MISSING
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass  # may still be JSON orjson refuses (NaN, lone surrogates, huge ints)
    try:
        return load_json(text)  # the standard library's path, as deep as it can go
    except (ValueError, RecursionError):
        return text


# What JavaScript's String.prototype.trim removes (WhiteSpace and LineTerminator): unlike
# str.strip, U+FEFF but not U+001C-U+001F or U+0085.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    return text.strip(JS_WHITESPACE)
