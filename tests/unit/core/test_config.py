"""tools.loopDetection configuration: defaults, tri-state enabled, per-agent merge, clamping,
validation and file loading."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from core_helpers import Run, exec_result, guard, text_result

from streams.core.config import (
    ConfigError,
    DetectorSwitches,
    config_warnings,
    resolve,
)
from streams.core.config_defaults import DEFAULTS, VERSIONED_WHEN_OFF, VERSIONED_WHEN_SET
from streams.core.events import Action
from streams.core.fleet import FleetConfig, fleet_from_document, fleet_warnings, load_fleet_config


def doc(block=None, agents=None):
    out = {"tools": {"loopDetection": block}} if block is not None else {}
    if agents is not None:
        out["agents"] = {
            "list": [{"id": aid, "tools": {"loopDetection": b}} for aid, b in agents.items()]
        }
    return out


# -- defaults ----------------------------------------------------------------------------


def test_defaults_match_spec_table():
    cfg = resolve(None)
    assert cfg.enabled is None  # unset, which is not the same as false
    assert cfg.history_size == 30
    assert cfg.warning_threshold == 10
    assert cfg.critical_threshold == 20
    assert cfg.unknown_tool_threshold == 10
    assert cfg.global_circuit_breaker_threshold == 30
    assert cfg.detectors == DetectorSwitches(True, True, True)
    assert cfg.compaction_window_size == 3
    assert cfg.abort_after_blocks == 3
    assert cfg.compaction_storm_threshold == 3
    assert (cfg.consecutive_errors_warning, cfg.consecutive_errors_critical) == (5, 10)
    assert cfg.error_repeat_threshold == 4
    assert cfg.detectors.consecutive_errors and cfg.detectors.error_repeat
    assert cfg.mode == "enforce" and cfg.enforced
    assert (cfg.scope, cfg.session_fresh_triggers) == ("run", ("cron", "heartbeat"))


def test_defaults_table_literal():
    assert DEFAULTS == {
        "enabled": None,
        "historySize": 30,
        "warningThreshold": 10,
        "criticalThreshold": 20,
        "unknownToolThreshold": 10,
        "globalCircuitBreakerThreshold": 30,
        "detectors": {
            "genericRepeat": True,
            "knownPollNoProgress": True,
            "pingPong": True,
            "consecutiveErrors": True,
            "errorRepeat": True,
            "compactionStorm": True,
            "unchangedOutcome": True,
            "repeatedCycle": True,
            "burstRepeat": True,
            "errorAcrossRuns": True,
        },
        "postCompactionGuard": {"windowSize": 3, "stormThreshold": 3},
        "abortAfterBlocks": 3,
        "consecutiveErrors": {"warningThreshold": 5, "criticalThreshold": 10},
        "errorRepeatThreshold": 4,
        "unchangedOutcome": {"warningThreshold": 5, "criticalThreshold": 8},
        "repeatedCycle": {"warningThreshold": 3, "criticalThreshold": 4},
        "burstRepeat": {"warningThreshold": 8, "criticalThreshold": 16, "repeatsPerCall": 2},
        "errorAcrossRuns": {"warningThreshold": 3, "criticalThreshold": 5},
        "mode": "enforce",
        "scope": "run",
        "sessionFreshTriggers": ["heartbeat", "cron"],
        "sessionGapSeconds": None,
        "compat": "loopguard",
        "deviations": {},
        "warnings": "log",
        "maxLoopTokens": None,
        "onBlock": "refuse",
        "holdTimeoutSeconds": 300,
        "holdDefault": "refuse",
    }


@pytest.mark.parametrize("source", [None, {}, {"tools": {}}, {"tools": {"loopDetection": {}}}])
def test_empty_documents_resolve_to_defaults(source):
    assert fleet_from_document(source).for_agent("any") == resolve({})


def test_explicit_defaults_equal_implicit_defaults():
    explicit = {k: v for k, v in DEFAULTS.items() if k != "enabled"}
    assert resolve(explicit) == resolve({})


# -- enabled tri-state -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "rolling", "compaction"),
    [
        ({}, False, True),
        ({"enabled": None}, False, True),
        ({"enabled": True}, True, True),
        ({"enabled": False}, False, False),
    ],
    ids=["unset", "null", "true", "false"],
)
def test_enabled_tristate(block, rolling, compaction):
    cfg = resolve(block)
    assert cfg.rolling_detectors_on is rolling
    assert cfg.compaction_guard_on is compaction


def _run_loop_then_compaction_loop(block):
    """A generic repeat loop long enough to block, then a compaction-retry loop."""
    lg = guard(dict(block, warningThreshold=2, criticalThreshold=3, abortAfterBlocks=99))
    run = Run(lg)
    for _ in range(5):
        run.plain_cycle("read", {"path": "a"}, text_result("same"))
    rolling = list(run.decisions)
    run.compaction()
    for _ in range(3):
        run.plain_cycle("list", {"dir": "/"}, text_result("x"))
    compaction = [d for d in run.decisions if d.detector == "post_compaction_guard"]
    return rolling, compaction


@pytest.mark.parametrize(
    ("enabled", "rolling", "compaction"),
    [(None, False, True), (True, True, True), (False, False, False)],
    ids=["unset", "true", "false"],
)
def test_enabled_tristate_behaviour(enabled, rolling, compaction):
    block = {} if enabled is None else {"enabled": enabled}
    got_rolling, got_compaction = _run_loop_then_compaction_loop(block)
    assert bool(got_rolling) is rolling
    assert bool(got_compaction) is compaction


# -- per-agent merge ---------------------------------------------------------------------


GLOBAL = {
    "enabled": True,
    "historySize": 50,
    "warningThreshold": 5,
    "criticalThreshold": 12,
    "unknownToolThreshold": 7,
    "globalCircuitBreakerThreshold": 40,
    "detectors": {"pingPong": False},
    "postCompactionGuard": {"windowSize": 4},
    "abortAfterBlocks": 6,
}


def test_agent_sets_only_warning_threshold_keeps_everything_else():
    fleet = fleet_from_document(doc(GLOBAL, {"safe-runner": {"warningThreshold": 8}}))
    cfg = fleet.for_agent("safe-runner")
    base = fleet.for_agent("someone-else")
    assert cfg.warning_threshold == 8
    assert base.warning_threshold == 5
    assert cfg.enabled is True
    assert cfg.history_size == 50
    assert cfg.critical_threshold == 12
    assert cfg.unknown_tool_threshold == 7
    assert cfg.global_circuit_breaker_threshold == 40
    assert cfg.detectors == DetectorSwitches(True, True, False)
    assert cfg.compaction_window_size == 4
    assert cfg.abort_after_blocks == 6


def test_agent_nested_detectors_merge_key_by_key():
    agent = {"detectors": {"genericRepeat": False}}
    cfg = fleet_from_document(doc(GLOBAL, {"a": agent})).for_agent("a")
    # global turned pingPong off, agent turned genericRepeat off, poll stays default on
    assert cfg.detectors == DetectorSwitches(
        generic_repeat=False, known_poll_no_progress=True, ping_pong=False
    )


def test_agent_nested_detectors_can_reenable_a_global_switch():
    cfg = fleet_from_document(doc(GLOBAL, {"a": {"detectors": {"pingPong": True}}})).for_agent("a")
    assert cfg.detectors == DetectorSwitches(True, True, True)


def test_agent_post_compaction_guard_merge():
    fleet = fleet_from_document(
        doc({"postCompactionGuard": {"windowSize": 5}}, {"a": {"postCompactionGuard": {}}})
    )
    assert fleet.for_agent("a").compaction_window_size == 5
    fleet = fleet_from_document(
        doc(
            {"postCompactionGuard": {"windowSize": 5}},
            {"a": {"postCompactionGuard": {"windowSize": 2}}},
        )
    )
    assert fleet.for_agent("a").compaction_window_size == 2
    assert fleet.for_agent("b").compaction_window_size == 5


@pytest.mark.parametrize(
    ("fleet_mode", "agent_block", "agent_mode"),
    [
        (None, {"mode": "observe"}, "observe"),  # one agent in shadow mode, fleet enforces
        ("observe", {"mode": "enforce"}, "enforce"),  # fleet observes, one agent enforces
        ("observe", {"warningThreshold": 4}, "observe"),  # an agent block without mode
        ("observe", None, "observe"),  # no agent block at all
    ],
)
def test_mode_merges_per_agent(fleet_mode, agent_block, agent_mode):
    block = {"enabled": True} if fleet_mode is None else {"enabled": True, "mode": fleet_mode}
    agents = {} if agent_block is None else {"a": agent_block}
    fleet = fleet_from_document(doc(block, agents))
    cfg = fleet.for_agent("a")
    assert cfg.mode == agent_mode
    assert cfg.enforced is (agent_mode == "enforce")
    assert fleet.for_agent("other").mode == (fleet_mode or "enforce")


def test_mode_errors_are_one_line_naming_the_field():
    with pytest.raises(ConfigError) as info:
        fleet_from_document(doc({}, {"coder": {"mode": "dry-run"}}))
    message = str(info.value)
    assert message == (
        'agents.list[0].tools.loopDetection.mode: expected "enforce" or "observe", got \'dry-run\''
    )
    assert "\n" not in message


def test_agent_failure_rules_merge_key_by_key():
    """consecutiveErrors merges per key like postCompactionGuard; the switches like detectors."""
    fleet = fleet_from_document(
        doc(
            {
                "consecutiveErrors": {"warningThreshold": 4, "criticalThreshold": 8},
                "errorRepeatThreshold": 5,
                "postCompactionGuard": {"stormThreshold": 6},
            },
            {
                "a": {
                    "consecutiveErrors": {"criticalThreshold": 6},
                    "detectors": {"errorRepeat": False},
                    "postCompactionGuard": {"windowSize": 2},
                }
            },
        )
    )
    a, other = fleet.for_agent("a"), fleet.for_agent("other")
    assert (a.consecutive_errors_warning, a.consecutive_errors_critical) == (4, 6)
    assert (other.consecutive_errors_warning, other.consecutive_errors_critical) == (4, 8)
    assert a.error_repeat_threshold == other.error_repeat_threshold == 5
    assert (a.compaction_window_size, a.compaction_storm_threshold) == (2, 6)
    assert not a.detectors.error_repeat and a.detectors.consecutive_errors
    assert other.detectors.error_repeat


@pytest.mark.parametrize(
    ("errors", "warning", "critical"),
    [
        ({"warningThreshold": 7}, 7, 10),
        ({"warningThreshold": 10}, 10, 11),
        ({"criticalThreshold": 2}, 5, 6),
    ],
)
def test_consecutive_errors_critical_is_raised_above_warning(errors, warning, critical):
    cfg = resolve({"consecutiveErrors": errors})
    assert (cfg.consecutive_errors_warning, cfg.consecutive_errors_critical) == (warning, critical)


def test_agent_enabled_override_both_directions():
    fleet = fleet_from_document(doc({"enabled": True}, {"off": {"enabled": False}}))
    assert fleet.for_agent("off").enabled is False
    assert fleet.for_agent("other").enabled is True
    fleet = fleet_from_document(doc({"enabled": False}, {"on": {"enabled": True}}))
    assert fleet.for_agent("on").enabled is True
    assert fleet.for_agent("on").compaction_guard_on is True
    assert fleet.for_agent("other").compaction_guard_on is False


def test_seed_example_safe_runner():
    fleet = fleet_from_document(
        doc(
            None,
            {"safe-runner": {"enabled": True, "warningThreshold": 8, "criticalThreshold": 16}},
        )
    )
    cfg = fleet.for_agent("safe-runner")
    assert (cfg.enabled, cfg.warning_threshold, cfg.critical_threshold) == (True, 8, 16)
    assert cfg.global_circuit_breaker_threshold == 30
    assert fleet.for_agent("main") == resolve({})


def test_agent_override_drives_the_engine_per_agent():
    lg = guard(doc({"enabled": True}, {"strict": {"warningThreshold": 2}}))
    strict = Run(lg, run_id="r-strict", agent_id="strict")
    lax = Run(lg, run_id="r-lax", agent_id="lax")
    for _ in range(3):
        strict.plain_cycle("read", {"p": 1}, text_result("x"))
        lax.plain_cycle("read", {"p": 1}, text_result("x"))
    assert [d.count for d in strict.decisions] == [2]
    assert lax.decisions == []


def test_with_agent_replaces_and_removes():
    fleet = fleet_from_document(doc({"warningThreshold": 4}))
    fleet2 = fleet.with_agent("x", {"warningThreshold": 6})
    assert fleet2.for_agent("x").warning_threshold == 6
    assert fleet.for_agent("x").warning_threshold == 4  # original untouched
    assert fleet2.with_agent("x", None).for_agent("x").warning_threshold == 4
    with pytest.raises(ConfigError, match=r"agents\.list\[id=x\]\.tools\.loopDetection\.bogus"):
        fleet.with_agent("x", {"bogus": 1})


def test_to_document_round_trip():
    fleet = fleet_from_document(doc(GLOBAL, {"b": {"historySize": 9}, "a": {"enabled": False}}))
    again = fleet_from_document(fleet.to_document())
    for agent in ("a", "b", "c"):
        assert again.for_agent(agent) == fleet.for_agent(agent)


# -- clamping ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "critical", "breaker"),
    [
        ({"warningThreshold": 10, "criticalThreshold": 10}, 11, 30),
        ({"warningThreshold": 10, "criticalThreshold": 3}, 11, 30),
        ({"criticalThreshold": 20, "globalCircuitBreakerThreshold": 20}, 20, 21),
        ({"criticalThreshold": 20, "globalCircuitBreakerThreshold": 1}, 20, 21),
        # chained: critical is raised first, then the breaker above the raised critical
        (
            {"warningThreshold": 25, "criticalThreshold": 5, "globalCircuitBreakerThreshold": 8},
            26,
            27,
        ),
        ({"warningThreshold": 40}, 41, 42),
        ({"warningThreshold": 3, "criticalThreshold": 4, "globalCircuitBreakerThreshold": 5}, 4, 5),
    ],
)
def test_clamping(block, critical, breaker):
    cfg = resolve(block)
    assert cfg.warning_threshold == block.get("warningThreshold", 10)
    assert cfg.critical_threshold == critical
    assert cfg.global_circuit_breaker_threshold == breaker
    assert cfg.warning_threshold < cfg.critical_threshold < cfg.global_circuit_breaker_threshold


def test_clamping_applies_after_agent_merge():
    fleet = fleet_from_document(doc({"criticalThreshold": 12}, {"a": {"warningThreshold": 15}}))
    cfg = fleet.for_agent("a")
    assert (cfg.warning_threshold, cfg.critical_threshold) == (15, 16)
    assert cfg.global_circuit_breaker_threshold == 30


def test_clamped_critical_is_what_the_detector_uses():
    lg = guard({"enabled": True, "warningThreshold": 3, "criticalThreshold": 1})
    run = Run(lg)
    for _ in range(6):
        run.plain_cycle("read", {"p": 1}, text_result("x"))
    assert [(d.action, d.count) for d in run.decisions] == [
        (Action.WARN, 3),
        (Action.BLOCK, 4),
        (Action.BLOCK, 5),
    ]


# -- validation --------------------------------------------------------------------------

G = "tools.loopDetection"


@pytest.mark.parametrize(
    ("block", "path"),
    [
        ({"bogus": 1}, f"{G}.bogus"),
        ({"historySize": "30"}, f"{G}.historySize"),
        ({"historySize": 30.5}, f"{G}.historySize"),
        ({"warningThreshold": True}, f"{G}.warningThreshold"),
        ({"criticalThreshold": False}, f"{G}.criticalThreshold"),
        ({"unknownToolThreshold": 0}, f"{G}.unknownToolThreshold"),
        ({"globalCircuitBreakerThreshold": -3}, f"{G}.globalCircuitBreakerThreshold"),
        ({"abortAfterBlocks": 0}, f"{G}.abortAfterBlocks"),
        ({"historySize": 0}, f"{G}.historySize"),
        ({"historySize": 10**9}, f"{G}.historySize"),
        ({"enabled": "yes"}, f"{G}.enabled"),
        ({"enabled": 1}, f"{G}.enabled"),
        ({"detectors": True}, f"{G}.detectors"),
        ({"detectors": {"genericRepeat": "off"}}, f"{G}.detectors.genericRepeat"),
        ({"detectors": {"pingpong": False}}, f"{G}.detectors.pingpong"),
        ({"postCompactionGuard": 3}, f"{G}.postCompactionGuard"),
        ({"postCompactionGuard": {"windowSize": 0}}, f"{G}.postCompactionGuard.windowSize"),
        ({"postCompactionGuard": {"windowSize": True}}, f"{G}.postCompactionGuard.windowSize"),
        ({"postCompactionGuard": {"windowSize": "3"}}, f"{G}.postCompactionGuard.windowSize"),
        ({"postCompactionGuard": {"size": 3}}, f"{G}.postCompactionGuard.size"),
        ({"postCompactionGuard": {"stormThreshold": 0}}, f"{G}.postCompactionGuard.stormThreshold"),
        ({"consecutiveErrors": 5}, f"{G}.consecutiveErrors"),
        ({"consecutiveErrors": {"warningThreshold": 0}}, f"{G}.consecutiveErrors.warningThreshold"),
        (
            {"consecutiveErrors": {"criticalThreshold": "9"}},
            f"{G}.consecutiveErrors.criticalThreshold",
        ),
        ({"consecutiveErrors": {"threshold": 3}}, f"{G}.consecutiveErrors.threshold"),
        ({"errorRepeatThreshold": 0}, f"{G}.errorRepeatThreshold"),
        ({"errorRepeatThreshold": True}, f"{G}.errorRepeatThreshold"),
        ({"detectors": {"errorRepeat": 1}}, f"{G}.detectors.errorRepeat"),
        ({"mode": "shadow"}, f"{G}.mode"),
        ({"mode": "Observe"}, f"{G}.mode"),
        ({"mode": True}, f"{G}.mode"),
        ({"mode": None}, f"{G}.mode"),
    ],
)
def test_validation_names_global_field(block, path):
    with pytest.raises(ConfigError) as info:
        fleet_from_document(doc(block))
    assert str(info.value).startswith(path + ":"), str(info.value)
    with pytest.raises(ConfigError):
        resolve(block)


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"bogus": 1}, "bogus"),
        ({"warningThreshold": True}, "warningThreshold"),
        ({"historySize": -1}, "historySize"),
        ({"detectors": {"nope": True}}, "detectors.nope"),
        ({"postCompactionGuard": {"windowSize": 0}}, "postCompactionGuard.windowSize"),
        ({"mode": ["observe"]}, "mode"),
    ],
)
def test_validation_names_agent_field(block, field):
    agents = [
        {"id": "ok", "tools": {"loopDetection": {}}},
        {"id": "bad", "tools": {"loopDetection": block}},
    ]
    with pytest.raises(ConfigError) as info:
        fleet_from_document({"agents": {"list": agents}})
    assert str(info.value).startswith(f"agents.list[1].tools.loopDetection.{field}:"), str(
        info.value
    )


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ([], "config"),
        ({"tools": "x"}, "tools"),
        ({"tools": {"loopDetection": []}}, G),
        ({"agents": {"list": {"a": 1}}}, "agents.list"),
        ({"agents": {"list": [{"tools": {}}]}}, "agents.list[0].id"),
        ({"agents": {"list": [{"id": 7}]}}, "agents.list[0].id"),
        ({"agents": {"list": [{"id": "a", "tools": {"loopDetection": 5}}]}}, "agents.list[0]"),
    ],
)
def test_document_shape_errors(document, path):
    with pytest.raises(ConfigError, match="^" + path.replace("[", r"\[").replace("]", r"\]")):
        fleet_from_document(document)


@pytest.mark.parametrize(
    ("document", "path"),
    [
        pytest.param({"tools": []}, "tools"),
        pytest.param({"agents": {"list": {}}}, "agents.list"),
        pytest.param({"agents": [{"id": "a"}]}, "agents"),
        pytest.param({"agents": "x"}, "agents"),
        pytest.param({"agents": {"list": [{"id": "a", "tools": ["x"]}]}}, "agents.list[0].tools"),
    ],
)
def test_document_shape_errors_wrong_container(document, path):
    with pytest.raises(ConfigError, match="^" + re.escape(path)):
        fleet_from_document(document)


def test_invalid_values_are_never_replaced_by_defaults():
    with pytest.raises(ConfigError):
        FleetConfig({"warningThreshold": "many"}).for_agent("x")


# -- files -------------------------------------------------------------------------------

JSON5_TEXT = """
// gateway config
{
  tools: {
    loopDetection: {
      enabled: true,   // master switch
      warningThreshold: 8,
      detectors: { pingPong: false, },
      /* block comment */
      postCompactionGuard: { windowSize: 2 },
    },
  },
  agents: { list: [
    { id: 'safe-runner', tools: { loopDetection: { criticalThreshold: 16, }, }, },
  ], },
}
"""

YAML_TEXT = """
tools:
  loopDetection:
    enabled: true
    warningThreshold: 8
    detectors:
      pingPong: false
    postCompactionGuard:
      windowSize: 2
agents:
  list:
    - id: safe-runner
      tools:
        loopDetection:
          criticalThreshold: 16
"""

JSON_TEXT = """{"tools": {"loopDetection": {"enabled": true, "warningThreshold": 8,
 "detectors": {"pingPong": false}, "postCompactionGuard": {"windowSize": 2}}},
 "agents": {"list": [{"id": "safe-runner",
   "tools": {"loopDetection": {"criticalThreshold": 16}}}]}}"""


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("gw.json5", JSON5_TEXT),
        ("gw.json", JSON_TEXT),
        ("gw.yaml", YAML_TEXT),
        ("gw.yml", YAML_TEXT),
    ],
)
def test_load_files(tmp_path: Path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    fleet = load_fleet_config(path)
    cfg = fleet.for_agent("safe-runner")
    assert cfg.enabled is True
    assert (cfg.warning_threshold, cfg.critical_threshold) == (8, 16)
    assert cfg.detectors == DetectorSwitches(True, True, False)
    assert cfg.compaction_window_size == 2
    assert fleet.for_agent("other").critical_threshold == 20
    assert load_fleet_config(str(path)).for_agent("safe-runner") == cfg


def test_all_formats_give_the_same_config(tmp_path: Path):
    versions = set()
    for name, text in (("a.json5", JSON5_TEXT), ("b.json", JSON_TEXT), ("c.yaml", YAML_TEXT)):
        (tmp_path / name).write_text(text, encoding="utf-8")
        versions.add(load_fleet_config(tmp_path / name).for_agent("safe-runner").version)
    assert len(versions) == 1


def test_empty_yaml_file_is_defaults(tmp_path: Path):
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    assert load_fleet_config(path).for_agent("a") == resolve({})


def test_missing_file(tmp_path: Path):
    path = tmp_path / "nope.json5"
    with pytest.raises(ConfigError, match="nope.json5"):
        load_fleet_config(path)


def test_directory_is_unreadable(tmp_path: Path):
    with pytest.raises(ConfigError, match=str(tmp_path.name)):
        load_fleet_config(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file(tmp_path: Path):
    path = tmp_path / "secret.json5"
    path.write_text("{}", encoding="utf-8")
    path.chmod(0)
    with pytest.raises(ConfigError, match="secret.json5"):
        load_fleet_config(path)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("broken.json5", "{ tools: { loopDetection: { enabled: true, "),
        ("broken.json", '{"tools": }'),
        ("broken.yaml", "tools:\n  loopDetection: [unclosed\n"),
        ("broken.yml", "tools: {a: 1\n"),
        ("binary.json5", "\x00\x01\x02"),
    ],
)
def test_bad_syntax_names_the_file(tmp_path: Path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
        load_fleet_config(path)


def test_non_utf8_file(tmp_path: Path):
    path = tmp_path / "latin1.json5"
    path.write_bytes(b'{ tools: { loopDetection: { enabled: "\xe9" } } }')
    with pytest.raises(ConfigError, match="latin1.json5"):
        load_fleet_config(path)


def test_validation_error_from_file(tmp_path: Path):
    path = tmp_path / "gw.yaml"
    path.write_text("tools:\n  loopDetection:\n    historySize: zero\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"tools\.loopDetection\.historySize"):
        load_fleet_config(path)


# -- config version ----------------------------------------------------------------------


def test_version_is_stable():
    a = resolve({"warningThreshold": 4, "detectors": {"pingPong": False}})
    b = resolve({"detectors": {"pingPong": False}, "warningThreshold": 4})
    assert a.version == b.version
    assert len(a.version) == 16
    assert resolve({}).version == resolve({"historySize": 30}).version
    assert resolve({}).version == fleet_from_document(None).for_agent("x").version


@pytest.mark.parametrize(
    "change",
    [
        {"enabled": True},
        {"enabled": False},
        {"historySize": 31},
        {"warningThreshold": 9},
        {"criticalThreshold": 21},
        {"unknownToolThreshold": 11},
        {"globalCircuitBreakerThreshold": 31},
        {"detectors": {"genericRepeat": False}},
        {"detectors": {"knownPollNoProgress": False}},
        {"detectors": {"pingPong": False}},
        {"postCompactionGuard": {"windowSize": 4}},
        {"abortAfterBlocks": 4},
        {"postCompactionGuard": {"stormThreshold": 4}},
        {"detectors": {"consecutiveErrors": False}},
        {"detectors": {"errorRepeat": False}},
        {"consecutiveErrors": {"warningThreshold": 4}},
        {"consecutiveErrors": {"criticalThreshold": 11}},
        {"errorRepeatThreshold": 5},
        {"mode": "observe"},
    ],
)
def test_version_changes_with_every_field(change):
    assert resolve(change).version != resolve({}).version


def test_default_mode_keeps_the_version_from_before_mode_existed():
    """Decisions recorded before issue 17's ``mode`` must keep matching their config's
    version, so the default is left out of the hash; observe is in it."""
    # scope and sessionFreshTriggers (session scope) are left out at their defaults alike
    # and so are issue 29's compat, deviations and detectors.compactionStorm, and issue 38's
    # unchangedOutcome and repeatedCycle (their blocks and switches)
    later = ("mode", *VERSIONED_WHEN_SET, "compat", "deviations")
    before = {key: value for key, value in DEFAULTS.items() if key not in later}
    before["detectors"] = {
        k: v for k, v in DEFAULTS["detectors"].items() if k not in VERSIONED_WHEN_OFF
    }
    canonical = json.dumps(before, sort_keys=True, separators=(",", ":")).encode()
    assert resolve({}).version == hashlib.sha256(canonical).hexdigest()[:16]
    assert resolve({"mode": "enforce"}).version == resolve({}).version
    assert resolve({"mode": "observe"}).version != resolve({}).version


def test_version_differs_per_agent_only_when_config_differs():
    fleet = fleet_from_document(doc({"enabled": True}, {"a": {"warningThreshold": 3}, "b": {}}))
    assert fleet.for_agent("a").version != fleet.for_agent("c").version
    assert fleet.for_agent("b").version == fleet.for_agent("c").version


def test_decisions_carry_the_config_version():
    lg = guard({"enabled": True, "warningThreshold": 1})
    run = Run(lg)
    run.plain_cycle("exec", {"command": "ls"}, exec_result("a"))
    decided = run.call("exec", {"command": "ls"})
    assert decided and decided[0].config_version == lg.config_for(run.agent_id).version


# -- thresholds the window can never reach ---------------------------------------------


def test_default_config_has_no_warnings():
    assert config_warnings(resolve({"enabled": True})) == []
    assert fleet_warnings(fleet_from_document(doc({"enabled": True}))) == []


def test_history_below_critical_is_reported_not_clamped():
    cfg = resolve({"enabled": True, "historySize": 8})
    assert cfg.history_size == 8  # kept: a short window is the spec's remedy for false positives
    text = " | ".join(config_warnings(cfg))
    assert "historySize 8 is below criticalThreshold 20" in text
    assert "globalCircuitBreakerThreshold 30" in text and "warningThreshold 10" in text
    assert "errorRepeatThreshold" not in text  # 3 <= 8


def test_warnings_only_when_the_rolling_detectors_run():
    assert config_warnings(resolve({"historySize": 2})) == []  # enabled unset: detectors off


def test_fleet_warnings_name_the_block(caplog):
    document = doc({"enabled": True}, {"tiny": {"historySize": 15}, "fine": {}})
    with caplog.at_level("WARNING", logger="loopguard.config"):
        fleet = fleet_from_document(document)
    found = fleet_warnings(fleet)
    assert found == [
        "agents.list[id=tiny].tools.loopDetection: historySize 15 is below criticalThreshold 20: "
        "genericRepeat, knownPollNoProgress and pingPong warn but never block (a count never "
        "exceeds the window); raise historySize to at least 20 or lower criticalThreshold",
        "agents.list[id=tiny].tools.loopDetection: historySize 15 is below "
        "globalCircuitBreakerThreshold 30: the global circuit breaker never fires (a count "
        "never exceeds the window); raise historySize to at least 30 or lower "
        "globalCircuitBreakerThreshold",
    ]
    assert [r.getMessage() for r in caplog.records] == found  # logged once, at load


def test_an_override_logs_its_warnings(caplog):
    with caplog.at_level("WARNING", logger="loopguard.config"):
        FleetConfig().with_override("*", {"enabled": True, "historySize": 25})
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and messages[0].startswith(
        "tools.loopDetection: historySize 25 is below globalCircuitBreakerThreshold 30"
    )


def test_the_warning_is_true_history_below_critical_never_blocks():
    cfg = {"enabled": True, "historySize": 4, "warningThreshold": 2, "criticalThreshold": 5}
    assert any("criticalThreshold 5" in t for t in config_warnings(resolve(cfg)))
    run = Run(guard(cfg))
    for _ in range(30):
        run.cycle("read", {"p": 1}, text_result("same"))
    assert {d.action for d in run.decisions} == {Action.WARN}
