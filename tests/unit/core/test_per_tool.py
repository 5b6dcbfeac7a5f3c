"""perTool (issue 17): validation, per-agent merge and config_version; a tool's thresholds,
exempt detectors and volatile fields in the core; replay determinism; and perTool entries for
other tools leaving every decision as it was."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from core_helpers import Run, fleet, guard, summary, text_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core.config import ConfigError, config_warnings, resolve
from streams.core.config_defaults import DEFAULTS
from streams.core.engine import LoopGuard
from streams.core.hashing import clear_memos
from streams.core.run_state import RunState
from streams.core.tool_config import EXEMPTABLE

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FETCH = {"url": "https://example.test/feed"}


# -- config ----------------------------------------------------------------------------------


def test_exemptable_names_are_the_detector_switches_plus_the_guard():
    # compactionStorm (issue 29) counts compaction retries, run-wide: no tool is exempt from it
    run_wide = {"compactionStorm"}
    assert set(EXEMPTABLE) == {*DEFAULTS["detectors"], "postCompactionGuard"} - run_wide


@pytest.mark.parametrize(
    ("per_tool", "message"),
    [
        ([], "tools.loopDetection.perTool: expected an object keyed by tool name, got list"),
        ({"web": 3}, "tools.loopDetection.perTool.web: expected an object, got int"),
        ({"web": {"warn": 3}}, "tools.loopDetection.perTool.web.warn: unknown field"),
        ({"web": {"warningThreshold": 0}}, "perTool.web.warningThreshold: expected a whole"),
        ({"web": {"criticalThreshold": True}}, "perTool.web.criticalThreshold: expected a whole"),
        ({"web": {"exempt": "pingPong"}}, "perTool.web.exempt: expected a list of strings"),
        ({"web": {"exempt": ["pingPong", "ping"]}}, "perTool.web.exempt[1]: unknown detector"),
        ({"web": {"exempt": ["globalCircuitBreaker"]}}, "perTool.web.exempt[0]: unknown detector"),
        ({"web": {"volatileFields": [1]}}, "perTool.web.volatileFields[0]: expected a string"),
        ({"web": {"volatileFields": ["a..b"]}}, "perTool.web.volatileFields[0]: malformed JSON"),
        ({"web": {"volatileFields": ["ok", ""]}}, "perTool.web.volatileFields[1]: malformed"),
    ],
)
def test_invalid_entries_name_their_path(per_tool, message):
    with pytest.raises(ConfigError) as caught:
        resolve({"perTool": per_tool})
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_agents_bad_entry_names_the_agent():
    doc = {
        "agents": {
            "list": [
                {
                    "id": "coder",
                    "tools": {"loopDetection": {"perTool": {"x": {"exempt": ["nope"]}}}},
                }
            ]
        }
    }
    with pytest.raises(
        ConfigError, match=r"agents\.list\[0\]\.tools\.loopDetection\.perTool\.x\.exempt\[0\]"
    ):
        fleet(doc)


def test_thresholds_default_to_the_blocks_and_are_clamped_like_the_top_level_pair():
    cfg = resolve(
        {
            "warningThreshold": 8,
            "criticalThreshold": 16,
            "perTool": {
                "a": {"warningThreshold": 3},
                "b": {"criticalThreshold": 4},  # below the block's warning 8: raised to 9
                "c": {"warningThreshold": 30, "criticalThreshold": 12},  # raised to 31
                "d": {"exempt": ["pingPong"]},
            },
        }
    )
    pairs = {tool: (v.warning_threshold, v.critical_threshold) for tool, v in cfg.per_tool.items()}
    assert pairs == {"a": (3, 16), "b": (8, 9), "c": (30, 31), "d": (8, 16)}
    assert (cfg.warning_threshold, cfg.critical_threshold) == (8, 16)  # the block's own
    # the breaker stays global: every view keeps the agent's
    assert {v.global_circuit_breaker_threshold for v in cfg.per_tool.values()} == {
        cfg.global_circuit_breaker_threshold
    }


def test_agent_entries_merge_field_by_field_over_the_fleets():
    doc = {
        "tools": {
            "loopDetection": {
                "perTool": {
                    "web_fetch": {"warningThreshold": 4, "volatileFields": ["fetchedAt"]},
                    "exec": {"exempt": ["pingPong"]},
                }
            }
        },
        "agents": {
            "list": [
                {
                    "id": "coder",
                    "tools": {
                        "loopDetection": {
                            "perTool": {
                                "web_fetch": {
                                    "criticalThreshold": 9,
                                    "volatileFields": ["requestId"],
                                },
                                "read": {"warningThreshold": 2},
                            }
                        }
                    },
                }
            ]
        },
    }
    cfg = fleet(doc).for_agent("coder")
    web = cfg.per_tool["web_fetch"]
    assert (web.warning_threshold, web.critical_threshold) == (4, 9)
    assert web.volatile is not None and web.volatile.paths == ("requestId",)  # a list replaces
    assert cfg.per_tool["exec"].exempt == {"pingPong"}
    assert cfg.per_tool["read"].warning_threshold == 2
    other = fleet(doc).for_agent("someone-else")
    assert set(other.per_tool) == {"web_fetch", "exec"}
    assert other.per_tool["web_fetch"].critical_threshold == 20


def test_config_version():
    base = resolve({"enabled": True})
    assert resolve({"enabled": True, "perTool": {}}).version == base.version  # as before
    assert resolve({"enabled": True, "perTool": {"x": {}}}).version == base.version
    one = resolve({"enabled": True, "perTool": {"x": {"volatileFields": ["a", "b"]}}})
    assert one.version != base.version
    reordered = resolve({"enabled": True, "perTool": {"x": {"volatileFields": ["b", "a", "a"]}}})
    assert reordered.version == one.version  # list order carries no meaning
    assert (
        len(
            {
                one.version,
                resolve({"enabled": True, "perTool": {"x": {"volatileFields": ["a"]}}}).version,
                resolve(
                    {"enabled": True, "perTool": {"y": {"volatileFields": ["a", "b"]}}}
                ).version,
                resolve({"enabled": True, "perTool": {"x": {"exempt": ["pingPong"]}}}).version,
                resolve({"enabled": True, "perTool": {"x": {"warningThreshold": 3}}}).version,
            }
        )
        == 5
    )
    # every view of a config carries the agent's version (decisions are stamped with it)
    assert one.per_tool["x"].version == one.version


def test_config_warnings_name_per_tool_thresholds_that_cannot_fire():
    cfg = resolve(
        {
            "enabled": True,
            "historySize": 12,
            "globalCircuitBreakerThreshold": 40,
            "warningThreshold": 5,
            "criticalThreshold": 10,
            "perTool": {"poll": {"criticalThreshold": 15}, "x": {"criticalThreshold": 45}},
        }
    )
    text = "\n".join(config_warnings(cfg))
    assert "perTool.poll: historySize 12 is below criticalThreshold 15" in text
    assert "perTool.x: criticalThreshold 45 is not below globalCircuitBreakerThreshold 40" in text


# -- the core --------------------------------------------------------------------------------


def fetch_loop(config: dict[str, Any], calls: int = 25, tool: str = "web_fetch") -> Run:
    """A tool answering the same page each time but for a fresh fetch time and request id
    (in its details and in the JSON text of its content, as OpenClaw's tools answer)."""
    run = Run(guard(config))
    for i in range(calls):
        payload = {"items": [{"title": "same", "fetchedAt": 1000 + i}], "requestId": f"r-{i}"}
        run.call(tool, FETCH)
        run.result(
            tool,
            FETCH,
            {"content": [{"type": "text", "text": json.dumps(payload)}], "details": payload},
        )
    return run


def test_without_volatile_fields_the_loop_stays_at_warning():
    run = fetch_loop({"enabled": True})
    assert {d.action.value for d in run.decisions} == {"warn"}  # as today: never blocked


def test_a_loop_differing_only_in_named_volatile_fields_is_caught():
    config = {
        "enabled": True,
        "perTool": {"web_fetch": {"volatileFields": ["items.*.fetchedAt", "requestId"]}},
    }
    run = fetch_loop(config)
    assert ("block", "generic_repeat", 20) in summary(run.decisions)
    assert run.decisions[-1].action.value == "abort"
    # naming the fields for another tool changes nothing for this one
    other = fetch_loop({"enabled": True, "perTool": {"exec": {"volatileFields": ["requestId"]}}})
    assert {d.action.value for d in other.decisions} == {"warn"}


def test_a_tools_thresholds_apply_to_its_calls_only():
    config = {
        "enabled": True,
        "perTool": {"status": {"warningThreshold": 2, "criticalThreshold": 4}},
    }
    run = Run(guard(config))
    for _ in range(5):
        run.call("status", {})
        run.result("status", {}, text_result("same"))
    assert summary(run.decisions) == [
        ("warn", "generic_repeat", 2),
        ("warn", "generic_repeat", 3),
        ("block", "generic_repeat", 4),
    ]
    other = Run(guard(config), run_id="run-2")
    for _ in range(5):
        other.call("read", {})
        other.result("read", {}, text_result("same"))
    assert other.decisions == []  # the block's own 10 / 20


def test_an_exempt_detector_never_fires_for_that_tools_calls():
    config = {
        "enabled": True,
        "warningThreshold": 2,
        "criticalThreshold": 3,
        "globalCircuitBreakerThreshold": 50,
        "perTool": {"poll_jobs": {"exempt": ["genericRepeat", "pingPong"]}},
    }
    run = Run(guard(config))
    for _ in range(10):
        run.call("poll_jobs", {})
        run.result("poll_jobs", {}, text_result("pending"))
    assert run.decisions == []
    pong = Run(guard(config), run_id="run-2")
    for _ in range(6):
        for tool in ("poll_jobs", "read"):
            pong.call(tool, {})
            pong.result(tool, {}, text_result("same"))
    # read's calls (not exempt) are caught, and the run is aborted; poll_jobs' are not
    caught = [d for d in pong.decisions if d.detector != "run_aborted"]
    assert caught and {(d.tool_name, d.detector) for d in caught} == {("read", "ping_pong")}


def test_the_breaker_stays_global_for_exempt_tools():
    config = {
        "enabled": True,
        "warningThreshold": 2,
        "criticalThreshold": 4,
        "globalCircuitBreakerThreshold": 6,
        "perTool": {"poll_jobs": {"exempt": ["genericRepeat"]}},
    }
    run = Run(guard(config))
    for _ in range(8):
        run.call("poll_jobs", {})
        run.result("poll_jobs", {}, text_result("pending"))
    assert summary(run.decisions)[0] == ("abort", "global_circuit_breaker", 6)


def test_exempt_from_failure_rules():
    config = {
        "enabled": True,
        "consecutiveErrors": {"warningThreshold": 3, "criticalThreshold": 6},
        "perTool": {"flaky": {"exempt": ["consecutiveErrors", "errorRepeat"]}},
    }
    run = Run(guard(config))
    for _ in range(8):  # the same failing call: errorRepeat would block the 5th
        run.call("flaky", {})
        run.result("flaky", {}, error="timeout")
    assert run.decisions == []
    # and its failures do not count in the run's streak: another tool's 2 failures don't warn
    for i in range(2):
        run.call("read", {"n": i})
        run.result("read", {"n": i}, error=f"e{i}")
    run.call("read", {"n": 9})
    assert run.decisions == []
    plain = Run(guard({**config, "perTool": {}}), run_id="run-2")
    for _ in range(5):
        plain.call("flaky", {})
        plain.result("flaky", {}, error="timeout")
    assert "error_repeat" in {d.detector for d in plain.decisions}


def test_exempt_from_the_post_compaction_guard():
    def compacted_loop(per_tool: dict[str, Any]) -> list[tuple[str, str, int]]:
        run = Run(guard({"perTool": per_tool}))
        run.compaction()
        for _ in range(3):
            run.call("poll_jobs", {})
            run.result("poll_jobs", {}, text_result("pending"))
        return summary(run.decisions)

    assert compacted_loop({}) == [("abort", "post_compaction_guard", 3)]
    assert compacted_loop({"poll_jobs": {"exempt": ["postCompactionGuard"]}}) == []


# -- replay determinism, and other tools' entries change nothing -------------------------------

tools = st.sampled_from(["web_fetch", "read", "poll_jobs"])


@st.composite
def tool_streams(draw):
    """Calls of a few tools, each answered with a payload whose volatile fields change now
    and then, plus failures and compactions."""
    run = Run(None, time_step=50)
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.integers(0, 9))
        tool = draw(tools)
        args = {"q": draw(st.integers(0, 1))}
        if kind == 9:
            run.make_compaction()
            continue
        run.make_call(tool, args)
        if kind == 8:
            run.make_result(tool, args, error="boom")
        else:
            payload = {"v": draw(st.integers(0, 1)), "at": draw(st.integers(0, 3))}
            run.make_result(
                tool,
                args,
                {"details": payload, "content": [{"type": "text", "text": json.dumps(payload)}]},
            )
    return run.events


PER_TOOL = {
    "enabled": True,
    "warningThreshold": 3,
    "criticalThreshold": 5,
    "perTool": {
        "web_fetch": {"volatileFields": ["at"], "warningThreshold": 2},
        "poll_jobs": {"exempt": ["genericRepeat", "consecutiveErrors", "postCompactionGuard"]},
    },
}


@SETTINGS
@given(tool_streams(), st.lists(st.integers(0, 200), max_size=3))
def test_replay_is_deterministic_across_processes_and_state_round_trips(events, cuts):
    first = LoopGuard(fleet(PER_TOOL))
    expected = [d for event in events for d in first.process(event)]
    clear_memos()  # another process: nothing memoised
    again = LoopGuard(fleet(json.loads(json.dumps(PER_TOOL))))
    got = []
    for i, event in enumerate(events):
        if i in {c % (len(events) + 1) for c in cuts}:  # the worker restarted from its changelog
            for run_id, state in list(again.runs.items()):
                again.runs[run_id] = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
        got.extend(again.process(event))
    assert got == expected


@SETTINGS
@given(tool_streams())
def test_entries_for_other_tools_leave_every_decision_as_it_was(events):
    base = {k: v for k, v in PER_TOOL.items() if k != "perTool"}
    other = {
        **base,
        "perTool": {
            "exec": {"volatileFields": ["at"], "exempt": ["pingPong"], "warningThreshold": 1}
        },
    }
    plain = [d for d in LoopGuard(fleet(base)).process_all(events)]
    with_other = [d for d in LoopGuard(fleet(other)).process_all(events)]
    assert [replace(d, config_version="") for d in with_other] == [
        replace(d, config_version="") for d in plain
    ]


# -- properties of the merge and of config_version -------------------------------------------

entries = st.fixed_dictionaries(
    {},
    optional={
        "warningThreshold": st.integers(1, 30),
        "criticalThreshold": st.integers(1, 30),
        "exempt": st.lists(st.sampled_from(EXEMPTABLE), max_size=3),
        "volatileFields": st.lists(st.sampled_from(["a", "b.c", "*.t", "x.*"]), max_size=3),
    },
)
per_tool_blocks = st.dictionaries(st.sampled_from(["read", "exec", "web"]), entries, max_size=3)


@SETTINGS
@given(per_tool_blocks, per_tool_blocks, st.integers(1, 30))
def test_an_agents_view_takes_each_field_from_the_agent_then_the_fleet(fleet_tools, agent_tools, w):
    doc = {
        "tools": {"loopDetection": {"warningThreshold": w, "perTool": fleet_tools}},
        "agents": {"list": [{"id": "a", "tools": {"loopDetection": {"perTool": agent_tools}}}]},
    }
    cfg = fleet(doc).for_agent("a")
    for tool in {*fleet_tools, *agent_tools}:
        merged = {**fleet_tools.get(tool, {}), **agent_tools.get(tool, {})}
        if not merged:
            assert tool not in cfg.per_tool
            continue
        view = cfg.per_tool[tool]
        warning = merged.get("warningThreshold", w)
        critical = max(merged.get("criticalThreshold", cfg.critical_threshold), warning + 1)
        assert (view.warning_threshold, view.critical_threshold) == (warning, critical)
        assert view.exempt == set(merged.get("exempt", []))
        paths = sorted(set(merged.get("volatileFields", [])))
        assert (list(view.volatile.paths) if view.volatile else []) == paths
        assert view.detectors.ping_pong == ("pingPong" not in view.exempt)


def _effect(per_tool: dict[str, Any]) -> dict[str, Any]:
    """What an entry means: list order and duplicates do not count, empty entries neither."""
    return {
        tool: {k: sorted(set(v)) if isinstance(v, list) else v for k, v in entry.items()}
        for tool, entry in per_tool.items()
        if entry
    }


@SETTINGS
@given(per_tool_blocks, per_tool_blocks)
def test_config_version_changes_exactly_when_the_entries_mean_something_else(one, other):
    same = resolve({"perTool": one}).version == resolve({"perTool": other}).version
    assert same == (_effect(one) == _effect(other))
