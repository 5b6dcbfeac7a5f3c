"""JSON decoded with bounded nesting, on the standard library alone (no orjson here: the
gateway client ships this module, and its codec decodes decisions with it).

The standard library's JSON recurses and gives up at Python's recursion limit, which counts
the caller's frames too: whether a deeply nested value parsed would depend on where it was
called from (worker vs. replay), and 50,000 nested lists (100 KB) raise RecursionError
wherever. So nesting is measured on the text first and refused past a fixed depth, and below
it the standard library runs with enough recursion headroom whatever the caller.
Canonical JSON (:mod:`streams.core.canonical`) takes its fallback paths through here too.
Not compiled with the core (setup.py CORE_MODULES): its error subclasses a builtin
exception, and the client imports it without mypy's extensions installed.
"""

from __future__ import annotations

import json
import re
import sys
from types import FrameType
from typing import Any

MAX_FALLBACK_DEPTH = 400
_HEADROOM = 2 * MAX_FALLBACK_DEPTH + 100
_JSON_SPECIALS = re.compile(r'[\[\]{}"\\]')


class NestedTooDeepError(RecursionError):
    """JSON nested deeper than allowed (MAX_FALLBACK_DEPTH at most)."""


def with_headroom(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a standard-library JSON function with room for MAX_FALLBACK_DEPTH levels."""
    frames = 0
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        frames, frame = frames + 1, frame.f_back
    limit = sys.getrecursionlimit()
    if frames + _HEADROOM <= limit:
        return fn(*args, **kwargs)
    sys.setrecursionlimit(frames + _HEADROOM)
    try:
        return fn(*args, **kwargs)
    finally:
        sys.setrecursionlimit(limit)


def text_depth(text: str, beyond: int = MAX_FALLBACK_DEPTH) -> int:
    """Deepest bracket nesting of JSON text (brackets inside strings do not count), or 0
    when the text has too few brackets to pass ``beyond`` at all.

    Linear in the text: each bracket, quote and backslash is looked at once.
    """
    if text.count("[") + text.count("{") <= beyond:
        return 0
    depth = deepest = 0
    in_string = False
    escaped_at = -1
    for match in _JSON_SPECIALS.finditer(text):
        char, at = match.group(), match.start()
        if at == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def value_depth(value: Any) -> int:
    """Deepest list/dict nesting of a decoded value, without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list | tuple):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
    return deepest


def load_json(text: str | bytes, max_depth: int = MAX_FALLBACK_DEPTH) -> Any:
    """Strictly decode JSON that another process wrote (a decision's extra, a schema, an
    incident signal), nested at most ``max_depth`` deep (MAX_FALLBACK_DEPTH at most):
    :class:`NestedTooDeepError` past it, ``ValueError`` for what is not JSON (or not UTF-8).
    Its size is the caller's to bound (a message's limit)."""
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8")
    depth = min(max_depth, MAX_FALLBACK_DEPTH)
    if text_depth(text, depth) > depth:
        raise NestedTooDeepError(f"JSON nested deeper than {depth} levels")
    return with_headroom(json.loads, text)
