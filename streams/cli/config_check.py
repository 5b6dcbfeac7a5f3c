"""``loopguard config check``: validate a fleet config file without a broker and print what
each block resolves to, every field (issue 27) and per-tool settings (``perTool``) included, so
an operator sees which thresholds, rules, exemptions, volatile fields, ignored args and status
results a tool's calls get before deploying the file."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from streams.cli.common import EXIT_OK, EXIT_USAGE
from streams.cli.config_errors import every_error, raised_thresholds
from streams.core.call_identity import BUILTIN_IGNORED_ARGS
from streams.core.config import ConfigError, LoopDetectionConfig, resolve
from streams.core.config_files import read_config_file
from streams.core.deviations import switch_values
from streams.core.fleet import GLOBAL_KEY, fleet_warnings, load_fleet_config, override_path
from streams.core.outcomes import is_status_tool
from streams.core.status_results import STATUS_TOOLS


def add_check_parser(actions: Any) -> None:
    check = actions.add_parser(
        "check",
        help="validate a config file and show what each agent resolves to (no broker)",
        description="Validate the fleet config FILE as a worker loads it and print, for the "
        "global block and every agent block (or only --agent ones), the resolved thresholds, "
        "config_version, the args left out of each tool's call identity, the status tools and "
        "perTool settings (thresholds, exempt detectors, volatileFields, ignoredArgs), "
        "the thresholds the rules raised ('raised:' lines: a critical threshold is kept above "
        "its warning threshold, the breaker above the critical), then the thresholds that can "
        "never fire. An invalid file: every error, one line each with the field's path, exit "
        "code 2.",
    )
    check.add_argument("file", metavar="FILE", help="fleet config: JSON5/JSON, YAML by extension")
    check.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="ID",
        help="show this agent only (repeatable; an agent without a block gets the global one)",
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")


# The fields on a block's first line; the rest go on their own lines (see _line).
HEAD = (
    "config_version",
    "enabled",
    "historySize",
    "warningThreshold",
    "criticalThreshold",
    "globalCircuitBreakerThreshold",
)


def describe(cfg: LoopDetectionConfig) -> dict[str, Any]:
    """Every resolved setting, in the config's own field names, with each tool's view."""
    d = cfg.detectors
    return {
        "config_version": cfg.version,
        "enabled": cfg.enabled,
        "historySize": cfg.history_size,
        "warningThreshold": cfg.warning_threshold,
        "criticalThreshold": cfg.critical_threshold,
        "globalCircuitBreakerThreshold": cfg.global_circuit_breaker_threshold,
        "unknownToolThreshold": cfg.unknown_tool_threshold,
        "abortAfterBlocks": cfg.abort_after_blocks,
        "errorRepeatThreshold": cfg.error_repeat_threshold,
        "consecutiveErrors": {
            "warningThreshold": cfg.consecutive_errors_warning,
            "criticalThreshold": cfg.consecutive_errors_critical,
        },
        "postCompactionGuard": {
            "windowSize": cfg.compaction_window_size,
            "stormThreshold": cfg.compaction_storm_threshold,
        },
        "unchangedOutcome": {
            "warningThreshold": cfg.unchanged_outcome_warning,
            "criticalThreshold": cfg.unchanged_outcome_critical,
        },
        "repeatedCycle": {
            "warningThreshold": cfg.repeated_cycle_warning,
            "criticalThreshold": cfg.repeated_cycle_critical,
        },
        "burstRepeat": {
            "warningThreshold": cfg.burst_repeat_warning,
            "criticalThreshold": cfg.burst_repeat_critical,
            "repeatsPerCall": cfg.burst_repeats_per_call,
        },
        "errorAcrossRuns": {
            "warningThreshold": cfg.error_across_runs_warning,
            "criticalThreshold": cfg.error_across_runs_critical,
        },
        "detectors": {
            "genericRepeat": d.generic_repeat,
            "knownPollNoProgress": d.known_poll_no_progress,
            "pingPong": d.ping_pong,
            "consecutiveErrors": d.consecutive_errors,
            "errorRepeat": d.error_repeat,
            "compactionStorm": d.compaction_storm,
            "unchangedOutcome": d.unchanged_outcome,
            "repeatedCycle": d.repeated_cycle,
            "burstRepeat": d.burst_repeat,
            "errorAcrossRuns": d.error_across_runs,
        },
        "mode": cfg.mode,
        "warnings": cfg.warnings,  # issue 43: "model" words each decision for the model
        "maxLoopTokens": cfg.max_loop_tokens or None,  # issue 43: null, no budget
        "scope": cfg.scope,
        "sessionFreshTriggers": list(cfg.session_fresh_triggers),
        "sessionGapSeconds": cfg.session_gap_ms // 1000,
        "compat": cfg.compat,
        "deviations": switch_values(cfg.deviations),
        "runBudget": {  # issue 41: only the saved estimate reads it; null: none known
            "calls": cfg.run_budget.calls or None,
            "tokens": cfg.run_budget.tokens or None,
        },
        "ignoredArgs": ignored_args(cfg),
        "statusResults": {"tools": status_tools(cfg)},
        "perTool": {
            tool: {
                "warningThreshold": view.warning_threshold,
                "criticalThreshold": view.critical_threshold,
                "exempt": sorted(view.exempt),
                "volatileFields": list(view.volatile.paths) if view.volatile else [],
                "ignoredArgs": list(view.ignored_args.paths) if view.ignored_args else [],
                "statusResult": is_status_tool(tool, view.hash_rules),
            }
            for tool, view in sorted(cfg.per_tool.items())
        },
    }


def ignored_args(cfg: LoopDetectionConfig) -> dict[str, list[str]]:
    """Per tool, the args left out of its calls' identity: the built-in knobs (unless
    ``deviations.ignoreExecutionKnobs`` is off) and its ``perTool`` ``ignoredArgs``."""
    found: dict[str, set[str]] = {}
    if cfg.deviations.ignore_execution_knobs:
        found = {tool: set(paths) for tool, paths in BUILTIN_IGNORED_ARGS.items()}
    for tool, view in cfg.per_tool.items():
        if view.ignored_args is not None:
            found.setdefault(tool, set()).update(view.ignored_args.paths)
    return {tool: sorted(found[tool]) for tool in sorted(found)}


def status_tools(cfg: LoopDetectionConfig) -> list[str]:
    """The tools whose results are hashed as status reports (status_results.py)."""
    tools = {
        tool
        for tool in {*STATUS_TOOLS, *cfg.per_tool}
        if is_status_tool(
            tool, cfg.per_tool[tool].hash_rules if tool in cfg.per_tool else cfg.hash_rules
        )
    }
    return sorted(tools)


def _flat(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or "-"
    return json.dumps(value) if not isinstance(value, str) else value


def _line(label: str, described: dict[str, Any]) -> list[str]:
    head = "  ".join(f"{key}={json.dumps(described[key])}" for key in HEAD)
    lines = [f"{label}  {head}"]
    rest = [key for key in described if key not in HEAD and key != "perTool"]
    scalars = [
        f"{key}={_flat(described[key])}" for key in rest if not isinstance(described[key], dict)
    ]
    lines.append(f"  {'  '.join(scalars)}")
    for key in rest:
        value = described[key]
        if isinstance(value, dict):
            fields = "  ".join(f"{sub}={_flat(item)}" for sub, item in value.items())
            lines.append(f"  {key}: {fields or '-'}")
    for tool, entry in described["perTool"].items():
        fields = [f"{key}={value}" for key, value in entry.items() if key.endswith("Threshold")]
        fields.append(f"exempt={','.join(entry['exempt']) or '-'}")
        fields.append(f"volatileFields={','.join(entry['volatileFields']) or '-'}")
        fields.append(f"ignoredArgs={','.join(entry['ignoredArgs']) or '-'}")
        fields.append(f"statusResult={json.dumps(entry['statusResult'])}")
        lines.append(f"  perTool {tool}: {'  '.join(fields)}")
    return lines


def run_check(args: argparse.Namespace) -> int:
    config_log = logging.getLogger("loopguard.config")
    config_log.disabled = True  # the warnings it logs at load are part of this report
    try:
        fleet = load_fleet_config(args.file)
        keys = args.agent or [GLOBAL_KEY, *sorted(fleet.agent_blocks)]
        blocks = {
            key: describe(
                resolve(fleet.global_block) if key == GLOBAL_KEY else fleet.for_agent(key)
            )
            for key in keys
        }
    except ConfigError as exc:
        return report_errors(args, exc)  # every error of the file, not only the first
    finally:
        config_log.disabled = False
    warnings = fleet_warnings(fleet)
    raised = {key: raised_thresholds(fleet, key, described) for key, described in blocks.items()}
    if args.json:
        doc = {"config": args.file, "blocks": blocks, "warnings": warnings, "raised": raised}
        print(json.dumps(doc, ensure_ascii=False, sort_keys=True))  # one JSON line (docs/cli.md)
        return EXIT_OK
    print(f"{args.file}: valid ({len(fleet.agent_blocks)} agent block(s))")
    for key, described in blocks.items():
        label = override_path(key) if key == GLOBAL_KEY or key in fleet.agent_blocks else key
        print("\n".join(_line(label, described)))
        for note in raised[key]:  # the file asked for less: say what it got
            print(f"  raised: {note}")
    for text in warnings:
        print(f"warning: {text}")
    return EXIT_OK


def report_errors(args: argparse.Namespace, first: ConfigError) -> int:
    """An invalid file: one line per error on stderr (``--json``: also one JSON object on
    stdout, ``valid`` false with the errors), exit code 2."""
    try:
        errors = every_error(read_config_file(args.file), first)
    except ConfigError as exc:  # not even a document (syntax, encoding): that one error
        errors = [str(exc)]
    if args.json:
        doc = {"config": args.file, "valid": False, "errors": errors}
        print(json.dumps(doc, ensure_ascii=False, sort_keys=True))
    for error in errors:
        print(f"loopguard config check: invalid config: {error}", file=sys.stderr)
    return EXIT_USAGE
