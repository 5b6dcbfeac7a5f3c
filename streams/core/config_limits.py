"""How large and how deeply nested a config record may be (issue 40): a refusal in one line,
never a RecursionError or a worker that swaps resolving a block nobody could have meant.

A ``tools.loopDetection`` block nests four levels at most (``perTool.<tool>.volatileFields``
is a list in an object in an object in the block), so MAX_CONFIG_DEPTH leaves room and
refuses the 50,000-deep ``[[[…]]]`` record of issue 40 before anything walks it; the size
limit keeps a ``perTool`` table of several thousand tools (issue 40's 3,300 tools took
685 KB) and refuses what no operator writes by hand.
"""

from __future__ import annotations

from typing import Any

import orjson

from streams.core.config_error import ConfigError

MAX_CONFIG_RECORD_BYTES = 1_048_576  # one override record's JSON text
MAX_CONFIG_DEPTH = 8  # lists/objects inside one another, the block itself counting 1
MAX_PER_TOOL_ENTRIES = 10_000  # tools named in one block's perTool


def value_depth(value: Any, beyond: int = MAX_CONFIG_DEPTH) -> int:
    """Deepest list/object nesting of a decoded value, without recursion; stops counting
    once past ``beyond`` (a refused value is not walked to its end)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            if deepest > beyond:
                return deepest
            stack.extend((child, depth + 1) for child in item)
    return deepest


def _too_deep(path: str) -> str:
    return (
        f"{path}: nested deeper than {MAX_CONFIG_DEPTH} levels (MAX_CONFIG_DEPTH); a "
        "tools.loopDetection block nests 4 at most"
    )


def check_limits(block: Any, path: str) -> None:
    """Refuse a block nested deeper than MAX_CONFIG_DEPTH or naming more than
    MAX_PER_TOOL_ENTRIES tools, naming ``path``."""
    if value_depth(block) > MAX_CONFIG_DEPTH:
        raise ConfigError(_too_deep(path))
    per_tool = block.get("perTool") if isinstance(block, dict) else None
    if isinstance(per_tool, dict) and len(per_tool) > MAX_PER_TOOL_ENTRIES:
        raise ConfigError(
            f"{path}.perTool: {len(per_tool)} tools, more than {MAX_PER_TOOL_ENTRIES} "
            "(MAX_PER_TOOL_ENTRIES)"
        )


def load_record(value: bytes, path: str) -> Any:
    """A config record's JSON text decoded within the limits: its size first (nothing is
    parsed past MAX_CONFIG_RECORD_BYTES), then orjson (which refuses nesting past 1,024 in C,
    without recursing in Python), then the block's own depth and table size."""
    if len(value) > MAX_CONFIG_RECORD_BYTES:
        raise ConfigError(
            f"{path}: record of {len(value):,} bytes, more than {MAX_CONFIG_RECORD_BYTES:,} "
            "(MAX_CONFIG_RECORD_BYTES)"
        )
    try:
        block = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):  # orjson's own limit, 1,024 levels
            raise ConfigError(_too_deep(path)) from None
        raise ConfigError(f"{path}: not valid JSON: {str(exc)[:200]}") from None
    check_limits(block, path)
    return block
