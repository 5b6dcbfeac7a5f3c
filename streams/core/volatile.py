"""Volatile fields an operator names per tool (``perTool.<tool>.volatileFields``), stripped
from that tool's results before they are hashed.

A field that changes on every call (a fetch time, a request id) makes every result "new", so a
stuck loop only ever reaches a warning; no built-in rule can know every tool's such fields.
A path is dot-separated keys, ``*`` standing for any key or any array item
(``data.items.*.fetchedAt``). Paths are matched from the result itself, from its ``details``
and from the JSON held by each text content entry, so ``messageId`` names the field wherever
an OpenClaw-style result repeats it. Stripping copies only the containers on a matching path;
it never recurses deeper than the longest path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

WILDCARD = "*"
_SORT = orjson.OPT_SORT_KEYS


def parse_path(text: str) -> tuple[str, ...]:
    """``"data.items.*.fetchedAt"`` -> its segments; ValueError saying what is malformed."""
    if not text:
        raise ValueError("empty path")
    if text != text.strip():
        raise ValueError(f"path {text!r} has leading or trailing whitespace")
    segments = tuple(text.split("."))
    if any(not segment for segment in segments):
        raise ValueError(f"path {text!r} has an empty segment (leading, trailing or double dot)")
    return segments


class PathNode:
    """One segment of the path trie: its children by key (``*`` for any) and whether a path
    ends here (the field is dropped)."""

    __slots__ = ("children", "terminal")

    def __init__(self) -> None:
        self.children: dict[str, PathNode] = {}
        self.terminal = False


class VolatileFields:
    """The parsed paths of one tool, as a trie; ``key`` names them in memo keys."""

    __slots__ = ("paths", "key", "root")

    def __init__(self, paths: Iterable[str]) -> None:
        texts = sorted(set(paths))
        self.paths = tuple(texts)
        self.key = "\n".join(texts)  # a string: its hash is cached, unlike a tuple's
        root = PathNode()
        for text in texts:
            node = root
            for segment in parse_path(text):
                child = node.children.get(segment)
                if child is None:
                    child = node.children[segment] = PathNode()
                node = child
            node.terminal = True
        self.root = root

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VolatileFields) and self.paths == other.paths

    def __hash__(self) -> int:
        return hash(self.paths)

    def __repr__(self) -> str:
        return f"VolatileFields({list(self.paths)!r})"

    def strip(self, value: Any) -> Any:
        """``value`` without the named fields, matched from its root (``value`` itself is
        returned when nothing matched)."""
        return _strip(value, [self.root])


def _strip(value: Any, nodes: list[PathNode]) -> Any:
    """Walk ``value`` along every trie node in ``nodes`` at once (a key can match a named
    child and a ``*`` child); unchanged containers are returned as they are, not copied."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        changed = False
        for key, item in value.items():
            matched: list[PathNode] = []
            for node in nodes:
                child = node.children.get(key) if isinstance(key, str) else None
                if child is not None:
                    matched.append(child)
                star = node.children.get(WILDCARD)
                if star is not None:
                    matched.append(star)
            if not matched:
                out[key] = item
                continue
            if any(node.terminal for node in matched):
                changed = True
                continue
            stripped = _strip(item, matched) if isinstance(item, dict | list) else item
            changed = changed or stripped is not item
            out[key] = stripped
        return out if changed else value
    if isinstance(value, list):
        stars = [star for node in nodes if (star := node.children.get(WILDCARD)) is not None]
        if not stars:
            return value
        if any(node.terminal for node in stars):
            return [] if value else value
        items = [_strip(item, stars) if isinstance(item, dict | list) else item for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items
    return value


def _strip_text_json(entry: Any, fields: VolatileFields) -> Any:
    """A text content entry whose text is a JSON object or array, with the fields stripped
    and the text written again (sorted keys); any other entry as it is."""
    if not isinstance(entry, dict):
        return entry
    text = entry.get("text")
    if not isinstance(text, str) or not text or text.lstrip()[:1] not in ("{", "["):
        return entry
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return entry  # not JSON (or JSON orjson refuses): hashed as the text it is
    stripped = fields.strip(parsed)
    if stripped is parsed:
        return entry
    try:
        return {**entry, "text": orjson.dumps(stripped, option=_SORT).decode()}
    except (TypeError, orjson.JSONEncodeError):
        return entry


def strip_result(result: Any, fields: VolatileFields) -> Any:
    """A decoded tool result with ``fields`` stripped from the result itself, its
    ``details`` and the JSON of its text content; anything else (a string, a number) as is."""
    if isinstance(result, list):
        return fields.strip(result)
    if not isinstance(result, dict):
        return result
    out = fields.strip(result)
    details = out.get("details")
    if isinstance(details, dict | list):
        stripped = fields.strip(details)
        if stripped is not details:
            out = {**out, "details": stripped}
    content = out.get("content")
    if isinstance(content, list):
        entries = [_strip_text_json(entry, fields) for entry in content]
        if any(new is not old for new, old in zip(entries, content, strict=True)):
            out = {**out, "content": entries}
    return out
