"""``perTool``: settings for one tool name inside a ``tools.loopDetection`` block (issue 17).

Each entry may set ``warningThreshold`` / ``criticalThreshold`` for that tool's calls (clamped
like the top-level pair), ``exempt`` detectors that never fire on its calls, and
``volatileFields`` stripped from its results before hashing, ``ignoredArgs`` left out of its
calls' identity (call_identity.py) and ``statusResult`` (its results are status reports whose
clocks and counters are masked, status_results.py). A per-agent block's
``perTool.<tool>`` merges field by field over the fleet's. This module validates, merges and
resolves the entries; :func:`streams.core.config.resolve` turns them into per-tool views of
the agent's config. The global circuit breaker (and ``unknownToolThreshold``, the
``compaction_storm`` rule) stay run-wide: no entry changes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.config_error import ConfigError, closest, unknown_field
from streams.core.volatile import VolatileFields, parse_path

PER_TOOL = "perTool"
THRESHOLD_FIELDS = ("warningThreshold", "criticalThreshold")
STATUS_RESULT_FIELD = "statusResult"
TOOL_FIELDS = (*THRESHOLD_FIELDS, "exempt", "volatileFields", "ignoredArgs", STATUS_RESULT_FIELD)
# The switchable detectors (the keys of ``detectors``) plus the post-compaction guard.
EXEMPTABLE = (
    "genericRepeat",
    "knownPollNoProgress",
    "pingPong",
    "consecutiveErrors",
    "errorRepeat",
    "unchangedOutcome",
    "repeatedCycle",
    "burstRepeat",
    "errorAcrossRuns",
    "postCompactionGuard",
)


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """One tool's resolved entry; ``None`` thresholds fall back to the block's own."""

    warning_threshold: int | None = None
    critical_threshold: int | None = None
    exempt: frozenset[str] = frozenset()
    volatile: VolatileFields | None = None
    ignored_args: VolatileFields | None = None
    status_result: bool | None = None  # None: the built-in list decides (status_results.py)


def check_per_tool(value: Any, where: str) -> None:
    """Validate a raw ``perTool`` object; :class:`ConfigError` names the bad field's path."""
    if not isinstance(value, dict):
        raise ConfigError(
            f"{where}: expected an object keyed by tool name, got {type(value).__name__}"
        )
    for tool, entry in value.items():
        if not isinstance(tool, str) or not tool:
            raise ConfigError(f"{where}: tool names must be non-empty strings, got {tool!r}")
        at = f"{where}.{tool}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: expected an object, got {type(entry).__name__}")
        for key, item in entry.items():
            if key not in TOOL_FIELDS:
                raise unknown_field(f"{at}.{key}", key, TOOL_FIELDS)
            if key in THRESHOLD_FIELDS:
                if isinstance(item, bool) or not isinstance(item, int) or item < 1:
                    raise ConfigError(f"{at}.{key}: expected a whole number >= 1, got {item!r}")
            elif key == "exempt":
                _check_exempt(item, f"{at}.{key}")
            elif key == STATUS_RESULT_FIELD:
                if not isinstance(item, bool):
                    raise ConfigError(f"{at}.{key}: expected true or false, got {item!r}")
            else:
                _check_paths(item, f"{at}.{key}")


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of strings, got {type(value).__name__}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ConfigError(f"{where}[{index}]: expected a string, got {item!r}")
    return value


def _check_exempt(value: Any, where: str) -> None:
    for index, name in enumerate(_strings(value, where)):
        if name not in EXEMPTABLE:
            guess = closest(name, EXEMPTABLE)
            hint = f'; did you mean "{guess}"?' if guess else ""
            raise ConfigError(
                f"{where}[{index}]: unknown detector {name!r}{hint} "
                f"(known: {', '.join(EXEMPTABLE)})"
            )


def _check_paths(value: Any, where: str) -> None:
    for index, path in enumerate(_strings(value, where)):
        try:
            parse_path(path)
        except ValueError as exc:
            raise ConfigError(f"{where}[{index}]: malformed JSON path: {exc}") from None


def merge_per_tool(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override``'s entries merged field by field over ``base``'s (a list replaces a list)."""
    merged = dict(base)
    for tool, entry in override.items():
        earlier = merged.get(tool)
        merged[tool] = {**earlier, **entry} if isinstance(earlier, dict) else entry
    return merged


def canonical_per_tool(per_tool: dict[str, Any]) -> dict[str, Any]:
    """The entries as they count for ``config_version``: lists sorted and deduplicated (their
    order means nothing), empty entries dropped."""
    canonical: dict[str, Any] = {}
    for tool, entry in per_tool.items():
        normal = {
            key: sorted(set(value)) if isinstance(value, list) else value
            for key, value in entry.items()
        }
        if normal:
            canonical[tool] = normal
    return canonical


# Resolved entries by the identity of their raw entry (kept alive beside them, so an id is
# never reused while cached): the agents that do not override a tool share its settings
# and its parsed paths instead of each parsing the table again (issue 40). Emptied when full.
SETTINGS_MEMO_SIZE = 32_768
_settings_memo: dict[int, tuple[dict[str, Any], ToolSettings]] = {}


def tool_settings(per_tool: dict[str, Any]) -> dict[str, ToolSettings]:
    """Checked raw entries -> resolved settings; entries that set nothing are left out.
    Raw entries are never changed once checked (merging makes new ones), so the settings of
    an entry already resolved are that entry's again."""
    settings: dict[str, ToolSettings] = {}
    for tool, entry in per_tool.items():
        if not entry:
            continue
        known = _settings_memo.get(id(entry))
        if known is not None and known[0] is entry:
            settings[tool] = known[1]
            continue
        paths = entry.get("volatileFields") or []
        ignored = entry.get("ignoredArgs") or []
        resolved = settings[tool] = ToolSettings(
            warning_threshold=entry.get("warningThreshold"),
            critical_threshold=entry.get("criticalThreshold"),
            exempt=frozenset(entry.get("exempt") or ()),
            volatile=VolatileFields(paths) if paths else None,
            ignored_args=VolatileFields(ignored) if ignored else None,
            status_result=entry.get(STATUS_RESULT_FIELD),
        )
        if len(_settings_memo) >= SETTINGS_MEMO_SIZE:
            _settings_memo.clear()
        _settings_memo[id(entry)] = (entry, resolved)
    return settings


def tool_threshold_warnings(
    tool: str, warning: int, critical: int, history_size: int, breaker: int
) -> list[str]:
    """Sentences for one tool's thresholds that can never fire as configured."""
    found = [
        f"perTool.{tool}: historySize {history_size} is below {name} {value}: "
        f"{tool}'s loops are never {effect} (a count never exceeds the window)"
        for name, value, effect in (
            ("warningThreshold", warning, "warned about"),
            ("criticalThreshold", critical, "blocked"),
        )
        if value > history_size
    ]
    if critical >= breaker:
        found.append(
            f"perTool.{tool}: criticalThreshold {critical} is not below "
            f"globalCircuitBreakerThreshold {breaker}: the breaker (run-wide) aborts {tool}'s "
            "identical loops before they are blocked"
        )
    return found
