"""A config change is judged by its effect (issue 40): the canonical loops played through the
core under the config before and after it; a loop stopped before and not after is a
weakening, whatever field names the change used."""

from __future__ import annotations

import pytest

from streams.core.config import resolve
from streams.core.config_canary import (
    LOOPS,
    MAX_TOOL_PROBES,
    play,
    probe_tools,
    stops,
    weakened_loops,
    weakening,
)
from streams.core.config_defaults import DEFAULTS

GUARDED = {"enabled": True}
EVERY_DETECTOR_OFF = {name: False for name in DEFAULTS["detectors"]}
AT_99999 = {"warningThreshold": 99999, "criticalThreshold": 99999}
ALL_THRESHOLDS_99999 = {
    **AT_99999,
    "globalCircuitBreakerThreshold": 99999,
    "unknownToolThreshold": 99999,
    "abortAfterBlocks": 99999,
    "errorRepeatThreshold": 99999,
    "consecutiveErrors": AT_99999,
    "unchangedOutcome": AT_99999,
    "repeatedCycle": AT_99999,
    "burstRepeat": AT_99999,
    "errorAcrossRuns": AT_99999,
    "postCompactionGuard": {"windowSize": 99999, "stormThreshold": 99999},
}


def test_every_canonical_loop_is_stopped_by_a_guarding_config() -> None:
    found = stops(resolve(GUARDED))
    assert set(found) == set(LOOPS)
    assert all(stop is not None for stop in found.values()), found
    detectors = {stop.detector for stop in found.values() if stop is not None}
    # each detector family has a loop it stops
    assert {
        "generic_repeat",
        "known_poll_no_progress",
        "ping_pong",
        "unchanged_outcome",
        "repeated_cycle",
        "error_repeat",
        "consecutive_errors",
        "post_compaction_guard",
        "compaction_storm",
    } <= detectors


@pytest.mark.parametrize(
    "change",
    [
        {"detectors": EVERY_DETECTOR_OFF},
        ALL_THRESHOLDS_99999,
        {"historySize": 1},
        {"enabled": False},
        {"mode": "observe"},
        {"compat": "openclaw"},
        {"detectors": {"pingPong": False, "unchangedOutcome": False, "repeatedCycle": False}},
    ],
    ids=["detectors-off", "99999", "history-1", "enabled-false", "observe", "compat", "some-off"],
)
def test_each_weakening_of_issue_40_is_flagged(change: dict) -> None:
    before, after = resolve(GUARDED), resolve({**GUARDED, **change})
    lost = weakened_loops(before, after)
    assert lost, change
    assert weakening(before, after).startswith("no longer stopped: ")


@pytest.mark.parametrize(
    ("change", "lost"),
    [
        ({"detectors": EVERY_DETECTOR_OFF}, 5),  # the breaker still aborts identical calls
        (ALL_THRESHOLDS_99999, 10),
        ({"historySize": 1}, 6),
        ({"enabled": False}, 10),
        ({"mode": "observe"}, 10),
        ({"compat": "openclaw"}, 5),
    ],
)
def test_how_many_loops_each_weakening_loses(change: dict, lost: int) -> None:
    """The counts docs/hardening.md gives."""
    assert len(weakened_loops(resolve(GUARDED), resolve({**GUARDED, **change}))) == lost


def test_the_issue_s_examples_name_the_loops_they_lose() -> None:
    before = resolve(GUARDED)
    history = weakened_loops(before, resolve({**GUARDED, "historySize": 1}))
    assert any(line.startswith("identical calls (was blocked at call 21") for line in history)
    off = weakened_loops(before, resolve({"enabled": False}))
    assert len(off) == len(LOOPS)  # nothing stopped at all


@pytest.mark.parametrize(
    "change",
    [
        {"warningThreshold": 8},  # warns sooner: nothing unstopped
        {"historySize": 40},
        {"perTool": {"read_file": {"volatileFields": ["$.details.mtime"]}}},
        {"scope": "session"},
    ],
)
def test_a_harmless_change_is_not_flagged(change: dict) -> None:
    assert weakening(resolve(GUARDED), resolve({**GUARDED, **change})) == ""


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({}, GUARDED),  # the rolling detectors switched on
        (GUARDED, {**GUARDED, "criticalThreshold": 12}),
        ({**GUARDED, "mode": "observe"}, GUARDED),
        ({"enabled": False}, {}),
    ],
)
def test_a_strengthening_is_not_flagged(before: dict, after: dict) -> None:
    assert weakened_loops(resolve(before), resolve(after)) == []


def test_the_same_config_is_not_played() -> None:
    cfg = resolve(GUARDED)
    assert weakened_loops(cfg, resolve(dict(GUARDED))) == []


def test_a_per_tool_exemption_of_a_real_tool_is_seen() -> None:
    """perTool can take one tool out of guarding; the loops are replayed with that tool."""
    exempt = ["genericRepeat", "unchangedOutcome", "repeatedCycle", "pingPong"]
    before = resolve(GUARDED)
    after = resolve({**GUARDED, "perTool": {"deploy": {"exempt": exempt}}})
    assert probe_tools(before, after) == ["deploy"]
    lost = weakened_loops(before, after)
    assert any(line.startswith("unchanged outcome of deploy") for line in lost), lost


def test_a_large_table_probes_one_tool_per_distinct_change() -> None:
    table = {f"t{n}": {"warningThreshold": 3 + n % 3} for n in range(3300)}
    before = resolve(GUARDED)
    after = resolve({**GUARDED, "perTool": table})
    probes = probe_tools(before, after)
    assert len(probes) == 3 <= MAX_TOOL_PROBES
    assert weakened_loops(before, after) == []  # lower thresholds weaken nothing


def test_defaults_to_every_threshold_high_loses_the_compaction_guard() -> None:
    """Under the defaults (rolling detectors off) only the compaction rules stop loops; a
    change that silences them is still a weakening."""
    lost = weakened_loops(resolve({}), resolve(ALL_THRESHOLDS_99999))
    assert [line.split(" (")[0] for line in lost] == ["compaction loop", "compaction storm"]


def test_an_observed_stop_does_not_count() -> None:
    steps = LOOPS["identical calls"]()
    assert play(steps, resolve(GUARDED)) is not None
    assert play(steps, resolve({**GUARDED, "mode": "observe"})) is None
