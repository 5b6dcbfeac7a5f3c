"""What ``loopguard config check`` reports beyond the resolved blocks (issue 41): every error of
an invalid file in one run, and every threshold the config's rules raised.

The loader stops at a file's first error, and each error names its field's path. To find the
next one, that field is taken out of a copy of the document and the copy is loaded again, until
it loads or an error names no field that can be taken out. Three typos are three lines of one
run, not three runs.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from streams.core.config import merge_blocks
from streams.core.config_defaults import DEFAULTS
from streams.core.config_error import ConfigError
from streams.core.fleet import GLOBAL_KEY, FleetConfig, fleet_from_document
from streams.core.tool_config import PER_TOOL

MAX_ERRORS = 50  # a file that is wrong everywhere: the first 50 say enough
_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\[id=([^\]]*)\]")


def every_error(doc: Any, first: ConfigError) -> list[str]:
    """The errors of a fleet document whose load raised ``first``, each once, in the order the
    loader meets them (``first`` first)."""
    errors = [str(first)]
    work = copy.deepcopy(doc)
    while len(errors) < MAX_ERRORS and _take_out(work, _path_of(errors[-1])):
        try:
            fleet_from_document(work)
        except ConfigError as exc:
            if str(exc) in errors:  # taking the field out did not help: stop here
                break
            errors.append(str(exc))
        else:
            break
    return errors


def _path_of(message: str) -> list[str | int]:
    """The field path an error message starts with (``a.b[0].c: why``), as keys, list indexes
    and ``id=AGENT`` entries; empty when it names none."""
    path, sep, _ = message.partition(": ")
    if not sep or path == "config":
        return []
    found: list[str | int] = []
    for key, index, agent in _SEGMENT.findall(path):
        found.append(key if key else int(index) if index else f"id={agent}")
    return found


def _take_out(doc: Any, path: list[str | int]) -> bool:
    """Remove the field at ``path`` from ``doc`` (in place); False when it is not there.

    A key is deleted; a bad item of a list takes its list with it, except an ``agents.list``
    entry (or its id), which is replaced by an entry with no block, so that later entries keep
    their indexes. A key with dots in it (a tool name) is found by joining the path's next
    segments."""
    if path[:2] == ["agents", "list"] and len(path) in (3, 4) and path[3:] in ([], ["id"]):
        entries = doc.get("agents", {}).get("list") if isinstance(doc, dict) else None
        at = path[2]
        if isinstance(entries, list) and isinstance(at, int) and 0 <= at < len(entries):
            entries[at] = {"id": f"(entry {at})"}
            return True
        return False
    parent: Any = None
    node: Any = doc
    at: str | int | None = None
    steps = list(path)
    while steps:
        step = steps.pop(0)
        if isinstance(step, str) and step.startswith("id=") and isinstance(node, list):
            step = next((i for i, e in enumerate(node) if _entry_id(e) == step[3:]), -1)
        if isinstance(node, dict):
            while step not in node and steps and isinstance(steps[0], str):
                step = f"{step}.{steps.pop(0)}"  # a dotted key: "mcp.search"
            if step not in node:
                return False
        elif not (isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node)):
            return False
        parent, at, node = node, step, node[step]
    if isinstance(parent, dict):
        del parent[at]
        return True
    if isinstance(parent, list):
        return _take_out(doc, path[:-1])
    return False


def _entry_id(entry: Any) -> Any:
    return entry.get("id") if isinstance(entry, dict) else None


# ---------------------------------------------------------------- thresholds the rules raised

# A threshold the config's rules may raise, and the one it is kept above.
KEPT_ABOVE = {
    "criticalThreshold": "warningThreshold",
    "globalCircuitBreakerThreshold": "criticalThreshold",
}


def raised_thresholds(fleet: FleetConfig, key: str, described: dict[str, Any]) -> list[str]:
    """The thresholds of ``key``'s block (``*``: the global one) that resolving raised above
    what the file (or the defaults) says, so that severities come in order: a critical
    threshold to one above its warning threshold, the breaker to one above the critical.
    ``described`` is the block as :func:`streams.cli.config_check.describe` shows it."""
    block = fleet.global_block
    if key != GLOBAL_KEY and key in fleet.agent_blocks:
        block = merge_blocks(fleet.global_block, fleet.agent_blocks[key])
    raw = merge_blocks(DEFAULTS, block)
    notes = [
        _note(path, asked, value, described)
        for path, asked, value in _int_pairs(raw, described, "")
        if asked != value
    ]
    for tool, entry in sorted((raw.get(PER_TOOL) or {}).items()):
        shown = described.get("perTool", {}).get(tool)
        if not isinstance(entry, dict) or not isinstance(shown, dict):
            continue
        asked = entry.get("criticalThreshold")
        inherited = asked is None
        if inherited:
            asked = described["criticalThreshold"]
        if shown["criticalThreshold"] != asked:
            origin = " (the block's)" if inherited else ""
            notes.append(
                f"perTool.{tool}.criticalThreshold {asked}{origin} raised to "
                f"{shown['criticalThreshold']} (above perTool.{tool}.warningThreshold "
                f"{shown['warningThreshold']})"
            )
    return notes


def _int_pairs(raw: Any, described: Any, prefix: str) -> list[tuple[str, int, int]]:
    """(path, the file's value, the resolved value) of every whole-number setting both have."""
    found: list[tuple[str, int, int]] = []
    if not isinstance(raw, dict) or not isinstance(described, dict):
        return found
    for name, value in described.items():
        if name == PER_TOOL or name not in raw:
            continue
        path, asked = f"{prefix}{name}", raw[name]
        if isinstance(value, dict):
            found += _int_pairs(asked, value, f"{path}.")
        elif _whole(value) and _whole(asked):
            found.append((path, asked, value))
    return found


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _note(path: str, asked: int, value: int, described: dict[str, Any]) -> str:
    """``criticalThreshold 5 raised to 11 (above warningThreshold 10)``."""
    parent, _, name = path.rpartition(".")
    scope: Any = described
    for part in parent.split(".") if parent else []:
        scope = scope.get(part, {}) if isinstance(scope, dict) else {}
    below = KEPT_ABOVE.get(name)
    why = ""
    if below is not None and isinstance(scope, dict) and below in scope:
        why = f" (above {parent + '.' if parent else ''}{below} {scope[below]})"
    return f"{path} {asked} raised to {value}{why}"
