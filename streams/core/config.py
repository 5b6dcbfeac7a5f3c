"""One ``tools.loopDetection`` block: defaults, merge, clamping, validation, resolution.

Config files use the gateway's own camelCase keys (JSON5, JSON or YAML), so an operator can
paste the block they already have (fleet.py reads the file and the per-agent overrides).
Invalid input raises :class:`ConfigError` naming the field; nothing is ever silently replaced
by a default.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from streams.core.agent_cycles_config import (
    AGENT_CYCLES,
    CYCLE_DEFAULTS,
    AgentCyclesConfig,
    canonical_agent_cycles,
    check_agent_cycles,
    resolve_agent_cycles,
)
from streams.core.config_defaults import (
    DEFAULTS,
    ENFORCE,
    HOLD_DEFAULTS,
    INT_BLOCKS,
    INT_FIELDS,
    MAX_HISTORY_SIZE,
    MODES,
    OBSERVE,
    ON_BLOCK,
    SCOPES,
    SESSION_GAP_SECONDS,
    VERSIONED_WHEN_OFF,
    VERSIONED_WHEN_SET,
    WARNINGS_TO,
)
from streams.core.config_error import ConfigError, unknown_field
from streams.core.deviations import (
    COMPAT,
    DEVIATIONS,
    LOOPGUARD,
    RAW_STATUS_RESULTS,
    STATUS_RESULT,
    Deviations,
    canonical_deviations,
    check_compat,
    check_deviations,
    own_agent_cycles,
    own_detectors,
    resolve_deviations,
)
from streams.core.incident_config import (
    INCIDENT_DEFAULTS,
    INCIDENTS,
    IncidentConfig,
    canonical_incidents,
    check_incidents,
    resolve_incidents,
)
from streams.core.run_budget import RUN_BUDGET, RunBudget, check_run_budget, resolve_run_budget
from streams.core.tool_config import (
    PER_TOOL,
    ToolSettings,
    canonical_per_tool,
    check_per_tool,
    merge_per_tool,
    tool_settings,
    tool_threshold_warnings,
)
from streams.core.volatile import VolatileFields


@dataclass(frozen=True, slots=True)
class DetectorSwitches:
    generic_repeat: bool = True
    known_poll_no_progress: bool = True
    ping_pong: bool = True
    consecutive_errors: bool = True
    error_repeat: bool = True
    compaction_storm: bool = True
    unchanged_outcome: bool = True
    repeated_cycle: bool = True
    burst_repeat: bool = True
    error_across_runs: bool = True


@dataclass(frozen=True, slots=True)
class LoopDetectionConfig:
    """Resolved (merged, validated, clamped) settings for one agent."""

    enabled: bool | None = None
    history_size: int = 30
    warning_threshold: int = 10
    critical_threshold: int = 20
    unknown_tool_threshold: int = 10
    global_circuit_breaker_threshold: int = 30
    detectors: DetectorSwitches = field(default_factory=DetectorSwitches)
    compaction_window_size: int = 3
    compaction_storm_threshold: int = 3
    abort_after_blocks: int = 3
    consecutive_errors_warning: int = 5
    consecutive_errors_critical: int = 10
    error_repeat_threshold: int = 4
    unchanged_outcome_warning: int = 5
    unchanged_outcome_critical: int = 8
    repeated_cycle_warning: int = 3
    repeated_cycle_critical: int = 4
    burst_repeat_warning: int = 8
    burst_repeat_critical: int = 16
    burst_repeats_per_call: int = 2
    error_across_runs_warning: int = 3
    error_across_runs_critical: int = 5
    mode: str = ENFORCE
    scope: str = "run"
    session_fresh_triggers: tuple[str, ...] = ("heartbeat", "cron")
    session_gap_ms: int = SESSION_GAP_SECONDS * 1000  # 0: a run carries whatever the gap
    compat: str = LOOPGUARD
    deviations: Deviations = field(default_factory=Deviations)
    hash_rules: int = 0  # deviations.hash_rules, kept at hand for every event's hashing
    version: str = ""
    # perTool (tool_config.py): each named tool's view of this config; in a view, the
    # detectors it is exempt from (camelCase names), its volatile result fields and the args
    # left out of its calls' identity (issue 44; its hash_rules also say whether its results
    # are status reports).
    per_tool: dict[str, LoopDetectionConfig] = field(default_factory=dict)
    exempt: frozenset[str] = frozenset()
    volatile: VolatileFields | None = None
    ignored_args: VolatileFields | None = None
    # issue 28 (incident_config.py): fleet-wide, only the global block's counts.
    incidents: IncidentConfig = field(default_factory=IncidentConfig)
    # issue 28 (agent_cycles_config.py): loops between agents, read per sending agent.
    agent_cycles: AgentCyclesConfig = field(default_factory=AgentCyclesConfig)
    # issue 41 (run_budget.py): what the agent's harness lets a run spend; only the
    # saved-tokens estimate reads it, so it is no part of ``version``.
    run_budget: RunBudget = field(default_factory=RunBudget)
    # issue 43: "model" words each decision for the model too (model_notes.py); a run whose
    # tokens while looping exceed ``max_loop_tokens`` is aborted (loop_spend.py; 0: never).
    warnings: str = "log"
    max_loop_tokens: int = 0
    # issue 43 (hold.py): what the gateway does with a blocked call: refuse it, or hold it
    # up to ``hold_timeout_seconds`` for an operator's release or abort, then ``hold_default``.
    on_block: str = "refuse"
    hold_timeout_seconds: int = 300
    hold_default: str = "refuse"

    @property
    def session_scope(self) -> bool:
        """A loop's counts survive a new run of the same session (``scope: "session"``)."""
        return self.scope == "session"

    @property
    def rolling_detectors_on(self) -> bool:
        """The history detectors only run when ``enabled`` is explicitly true."""
        return self.enabled is True

    @property
    def compaction_guard_on(self) -> bool:
        """The post-compaction guard runs unless ``enabled`` is explicitly false."""
        return self.enabled is not False

    @property
    def enforced(self) -> bool:
        """Whether gateways act on this agent's decisions (``mode: "observe"`` only logs)."""
        return self.mode != OBSERVE


# The blocks with a module of their own, known next to DEFAULTS' fields.
BLOCKS = (PER_TOOL, INCIDENTS, AGENT_CYCLES, RUN_BUDGET)


def check_block(block: Any, path: str) -> dict[str, Any]:
    """Validate one raw ``tools.loopDetection`` block (unknown fields, types, ranges).

    Returns the block itself (``{}`` for ``None``), unchanged: defaults and clamping are
    :func:`resolve`'s job. Raises :class:`ConfigError` naming ``path`` plus the bad field, so a
    config file, an override on the config topic and ``loopguard config set`` all fail alike.
    """
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise ConfigError(f"{path}: expected an object, got {type(block).__name__}")
    for key, value in block.items():
        where = f"{path}.{key}"
        if key not in DEFAULTS and key not in BLOCKS:
            raise unknown_field(where, key, [*DEFAULTS, *BLOCKS])
        if key == AGENT_CYCLES:
            check_agent_cycles(value, where)
        elif key == RUN_BUDGET:
            check_run_budget(value, where)
        elif key == INCIDENTS:
            check_incidents(value, where)
        elif key == PER_TOOL:
            check_per_tool(value, where)
        elif key == "enabled":
            if value is not None and not isinstance(value, bool):
                raise ConfigError(f"{where}: expected true or false, got {value!r}")
        elif key == "mode":
            if value not in MODES:
                raise ConfigError(f'{where}: expected "enforce" or "observe", got {value!r}')
        elif key in INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{where}: expected a whole number, got {value!r}")
            if value < 1:
                raise ConfigError(f"{where}: must be at least 1, got {value}")
            if key == "historySize" and value > MAX_HISTORY_SIZE:
                raise ConfigError(f"{where}: must be at most {MAX_HISTORY_SIZE}, got {value}")
        elif key == "scope":
            if value not in SCOPES:
                raise ConfigError(f'{where}: expected "run" or "session", got {value!r}')
        elif key == "sessionFreshTriggers":
            _check_triggers(value, where)
        elif key == "warnings":
            if value not in WARNINGS_TO:
                raise ConfigError(f'{where}: expected "log" or "model", got {value!r}')
        elif key in ("onBlock", "holdDefault"):
            choices = ON_BLOCK if key == "onBlock" else HOLD_DEFAULTS
            if value not in choices:
                quoted = " or ".join(f'"{c}"' for c in choices)
                raise ConfigError(f"{where}: expected {quoted}, got {value!r}")
        elif key == "holdTimeoutSeconds":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 86_400:
                raise ConfigError(f"{where}: expected whole seconds from 1 to 86400, got {value!r}")
        elif key == "maxLoopTokens":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{where}: expected a whole number of tokens, got {value!r}")
            if value is not None and value < 1:
                raise ConfigError(f"{where}: must be at least 1, got {value}")
        elif key == "sessionGapSeconds":
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ConfigError(
                    f"{where}: expected a whole number of seconds >= 0, got {value!r}"
                )
        elif key == COMPAT:
            check_compat(value, where)
        elif key == DEVIATIONS:
            check_deviations(value, where)
        else:
            _check_nested(key, value, where)
    return block


def _check_triggers(value: Any, where: str) -> None:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of trigger names, got {value!r}")
    for index, trigger in enumerate(value):
        if not isinstance(trigger, str) or not trigger:
            raise ConfigError(f"{where}[{index}]: expected a non-empty string, got {trigger!r}")


def _check_nested(key: str, value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object, got {type(value).__name__}")
    for sub, sub_value in value.items():
        if sub not in DEFAULTS[key]:
            raise unknown_field(f"{where}.{sub}", sub, DEFAULTS[key])
        if key == "detectors" and not isinstance(sub_value, bool):
            raise ConfigError(f"{where}.{sub}: expected true or false, got {sub_value!r}")
        if key in INT_BLOCKS and (
            isinstance(sub_value, bool) or not isinstance(sub_value, int) or sub_value < 1
        ):
            raise ConfigError(f"{where}.{sub}: expected a whole number >= 1, got {sub_value!r}")


def merge_blocks(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Field-by-field merge: nested blocks (``detectors``, ``postCompactionGuard``,
    ``consecutiveErrors``) merge per key too, ``perTool`` per tool and field."""
    merged = {key: _one_level(value) for key, value in base.items()}
    for key, value in override.items():
        if key == PER_TOOL and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_per_tool(merged[key], value)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _one_level(value: Any) -> Any:
    """A copy of an object's or a list's own level: the merged block is the caller's to
    change at that level, while what lies below (a ``perTool`` table's entries) is shared,
    never changed by resolving: a deep copy of a 3,300-tool table per agent was most of
    what a new agent cost (issue 40)."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def resolve(block: dict[str, Any] | None, path: str = "tools.loopDetection") -> LoopDetectionConfig:
    """Apply defaults and the runtime's clamping rules to one raw block."""
    checked = check_block(block, path)
    raw = merge_blocks(DEFAULTS, checked)
    per_tool = raw.pop(PER_TOOL, None) or {}
    incidents = {**INCIDENT_DEFAULTS, **(raw.pop(INCIDENTS, None) or {})}
    compat = raw.pop(COMPAT)
    cycles_block = own_agent_cycles(raw.pop(AGENT_CYCLES, None) or {}, compat)  # compat: off
    run_budget = resolve_run_budget(raw.pop(RUN_BUDGET, None) or {})  # not in the version
    agent_cycles = resolve_agent_cycles({**CYCLE_DEFAULTS, **cycles_block})
    deviations = resolve_deviations(raw.pop(DEVIATIONS), compat)
    detectors = own_detectors(raw["detectors"], checked.get("detectors") or {}, compat)
    warning = raw["warningThreshold"]
    # Misconfigured thresholds are raised, never lowered: critical > warning > 0,
    # breaker > critical, so the severities always come in order.
    critical = max(raw["criticalThreshold"], warning + 1)
    breaker = max(raw["globalCircuitBreakerThreshold"], critical + 1)
    errors = raw["consecutiveErrors"]
    # The same raising rule for the error streak's own pair of thresholds.
    errors_critical = max(errors["criticalThreshold"], errors["warningThreshold"] + 1)
    unchanged, cycles = raw["unchangedOutcome"], raw["repeatedCycle"]
    unchanged_critical = max(unchanged["criticalThreshold"], unchanged["warningThreshold"] + 1)
    cycles_critical = max(cycles["criticalThreshold"], cycles["warningThreshold"] + 1)
    burst = raw["burstRepeat"]
    burst_critical = max(burst["criticalThreshold"], burst["warningThreshold"] + 1)
    across = raw["errorAcrossRuns"]
    across_critical = max(across["criticalThreshold"], across["warningThreshold"] + 1)
    gap_default = SESSION_GAP_SECONDS if compat == LOOPGUARD else 0  # off under compat
    gap = gap_default if raw["sessionGapSeconds"] is None else raw["sessionGapSeconds"]
    fresh_triggers = tuple(sorted(set(raw["sessionFreshTriggers"])))
    canonical = {
        **raw,
        "detectors": {  # the later detectors only when off: versions as before
            name: on for name, on in detectors.items() if not on or name not in VERSIONED_WHEN_OFF
        },
        "criticalThreshold": critical,
        "globalCircuitBreakerThreshold": breaker,
        "consecutiveErrors": {**errors, "criticalThreshold": errors_critical},
        "unchangedOutcome": {**unchanged, "criticalThreshold": unchanged_critical},
        "repeatedCycle": {**cycles, "criticalThreshold": cycles_critical},
        "burstRepeat": {**burst, "criticalThreshold": burst_critical},
        "errorAcrossRuns": {**across, "criticalThreshold": across_critical},
        "sessionFreshTriggers": list(fresh_triggers),
        # its default follows compat: in the version only when off that default
        "sessionGapSeconds": None if gap == gap_default else gap,
    }
    if off := canonical_deviations(deviations):  # only switches off loopguard's rule count
        canonical[DEVIATIONS] = off
    if canonical_incident_block := canonical_incidents(incidents):  # absent at the defaults
        canonical[INCIDENTS] = canonical_incident_block
    if canonical_cycles := canonical_agent_cycles(agent_cycles):  # absent at the defaults
        canonical[AGENT_CYCLES] = canonical_cycles
    if canonical_tools := canonical_per_tool(per_tool):  # absent when empty: versions as before
        canonical[PER_TOOL] = canonical_tools
    if canonical["mode"] == ENFORCE:
        # The default leaves the hash as it was before ``mode`` existed, so decisions
        # recorded by older workers keep matching their config's version in replay.
        del canonical["mode"]
    for name in VERSIONED_WHEN_SET:
        default = DEFAULTS[name]
        if canonical[name] == (sorted(default) if isinstance(default, list) else default):
            del canonical[name]
    version = hashlib.sha256(
        json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()[:16]
    cfg = LoopDetectionConfig(
        enabled=raw["enabled"],
        history_size=raw["historySize"],
        warning_threshold=warning,
        critical_threshold=critical,
        unknown_tool_threshold=raw["unknownToolThreshold"],
        global_circuit_breaker_threshold=breaker,
        detectors=DetectorSwitches(
            generic_repeat=detectors["genericRepeat"],
            known_poll_no_progress=detectors["knownPollNoProgress"],
            ping_pong=detectors["pingPong"],
            consecutive_errors=detectors["consecutiveErrors"],
            error_repeat=detectors["errorRepeat"],
            compaction_storm=detectors["compactionStorm"],
            unchanged_outcome=detectors["unchangedOutcome"],
            repeated_cycle=detectors["repeatedCycle"],
            burst_repeat=detectors["burstRepeat"],
            error_across_runs=detectors["errorAcrossRuns"],
        ),
        compaction_window_size=raw["postCompactionGuard"]["windowSize"],
        compaction_storm_threshold=raw["postCompactionGuard"]["stormThreshold"],
        abort_after_blocks=raw["abortAfterBlocks"],
        consecutive_errors_warning=errors["warningThreshold"],
        consecutive_errors_critical=errors_critical,
        error_repeat_threshold=raw["errorRepeatThreshold"],
        unchanged_outcome_warning=unchanged["warningThreshold"],
        unchanged_outcome_critical=unchanged_critical,
        repeated_cycle_warning=cycles["warningThreshold"],
        repeated_cycle_critical=cycles_critical,
        burst_repeat_warning=burst["warningThreshold"],
        burst_repeat_critical=burst_critical,
        burst_repeats_per_call=burst["repeatsPerCall"],
        error_across_runs_warning=across["warningThreshold"],
        error_across_runs_critical=across_critical,
        mode=raw["mode"],
        scope=raw["scope"],
        session_fresh_triggers=fresh_triggers,
        session_gap_ms=gap * 1000,
        compat=compat,
        deviations=deviations,
        hash_rules=deviations.hash_rules,
        version=version,
        incidents=resolve_incidents(incidents),
        agent_cycles=agent_cycles,
        run_budget=run_budget,
        warnings=raw["warnings"],
        max_loop_tokens=raw["maxLoopTokens"] or 0,
        on_block=raw["onBlock"],
        hold_timeout_seconds=raw["holdTimeoutSeconds"],
        hold_default=raw["holdDefault"],
    )
    if not per_tool:
        return cfg
    views = {tool: tool_view(cfg, entry) for tool, entry in tool_settings(per_tool).items()}
    return replace(cfg, per_tool=views)


def tool_view(cfg: LoopDetectionConfig, entry: ToolSettings) -> LoopDetectionConfig:
    """The config a tool's calls and results are judged by: its thresholds (critical raised
    above warning, as the top-level pair), its exempt detectors switched off, its volatile
    fields, its ignored args and whether its results are status reports (``statusResult``, in
    its ``hash_rules``). The breaker, the other rules and ``version`` are the agent's."""
    warning = entry.warning_threshold or cfg.warning_threshold
    critical = max(entry.critical_threshold or cfg.critical_threshold, warning + 1)
    on, exempt = cfg.detectors, entry.exempt
    return replace(
        cfg,
        warning_threshold=warning,
        critical_threshold=critical,
        detectors=DetectorSwitches(
            generic_repeat=on.generic_repeat and "genericRepeat" not in exempt,
            known_poll_no_progress=on.known_poll_no_progress
            and "knownPollNoProgress" not in exempt,
            ping_pong=on.ping_pong and "pingPong" not in exempt,
            consecutive_errors=on.consecutive_errors and "consecutiveErrors" not in exempt,
            error_repeat=on.error_repeat and "errorRepeat" not in exempt,
            compaction_storm=on.compaction_storm,
            unchanged_outcome=on.unchanged_outcome and "unchangedOutcome" not in exempt,
            repeated_cycle=on.repeated_cycle and "repeatedCycle" not in exempt,
            burst_repeat=on.burst_repeat and "burstRepeat" not in exempt,
            error_across_runs=on.error_across_runs and "errorAcrossRuns" not in exempt,
        ),
        per_tool={},
        exempt=exempt,
        volatile=entry.volatile,
        ignored_args=entry.ignored_args,
        hash_rules=_tool_rules(cfg.hash_rules, entry.status_result),
    )


def _tool_rules(rules: int, status_result: bool | None) -> int:
    """A tool's hashing switches: ``statusResult`` set wins over the built-in status list."""
    if status_result is None:
        return rules
    if status_result:
        return (rules | STATUS_RESULT) & ~RAW_STATUS_RESULTS
    return (rules | RAW_STATUS_RESULTS) & ~STATUS_RESULT


def config_warnings(cfg: LoopDetectionConfig) -> list[str]:
    """Thresholds this config can never reach because ``historySize`` is smaller.

    Every history count (repeats, identical-outcome streaks, ping-pong alternations,
    unknown-tool and same-error streaks) is taken over the window before the current call,
    so it never exceeds ``historySize``: a threshold above it silently never fires. Such a
    window is kept as configured, not clamped (shortening ``historySize`` is the spec's own
    remedy for false positives); loading the config logs these sentences instead. Only
    ``consecutiveErrors`` and the compaction rules count outside the window.
    """
    if not cfg.rolling_detectors_on:
        return []
    size = cfg.history_size
    checks = (
        ("warningThreshold", cfg.warning_threshold, "loops are never even warned about"),
        (
            "criticalThreshold",
            cfg.critical_threshold,
            "genericRepeat, knownPollNoProgress and pingPong warn but never block",
        ),
        (
            "globalCircuitBreakerThreshold",
            cfg.global_circuit_breaker_threshold,
            "the global circuit breaker never fires",
        ),
        ("unknownToolThreshold", cfg.unknown_tool_threshold, "unknown tools are never blocked"),
        ("errorRepeatThreshold", cfg.error_repeat_threshold, "errorRepeat never fires"),
    )
    found = [
        f"historySize {size} is below {name} {value}: {effect} (a count never exceeds the "
        f"window); raise historySize to at least {value} or lower {name}"
        for name, value, effect in checks
        if value > size
    ]
    breaker = cfg.global_circuit_breaker_threshold
    for tool in sorted(cfg.per_tool):
        view = cfg.per_tool[tool]
        found += tool_threshold_warnings(
            tool, view.warning_threshold, view.critical_threshold, size, breaker
        )
    return found
