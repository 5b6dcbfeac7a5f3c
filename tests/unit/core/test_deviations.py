"""Issue 29: ``compat`` and the ``deviations`` switches, as config (validation, merge,
``config_version``) and as behaviour; the call-by-call agreement with the reference is
test_reference_agreement.py's."""

from __future__ import annotations

import json

import pytest
from core_helpers import VETO, Run, loop_guard, text_result

from streams.core.config import ConfigError, resolve
from streams.core.deviations import DETECTOR_SWITCHES, SWITCHES, Deviations, switch_values
from streams.core.events import Action
from streams.core.fleet import fleet_from_document
from streams.core.run_state import RunState

ALL_OFF = dict.fromkeys(SWITCHES, False)


def test_every_switch_defaults_to_loopguards_rule():
    cfg = resolve({})
    assert cfg.compat == "loopguard"
    assert cfg.deviations == Deviations()
    assert all(switch_values(cfg.deviations).values())
    assert cfg.hash_rules == 0
    assert cfg.detectors.compaction_storm


def test_compat_openclaw_switches_every_deviation_off():
    cfg = resolve({"compat": "openclaw"})
    assert not any(switch_values(cfg.deviations).values())
    assert cfg.hash_rules == 1 | 2 | 4 | 8 | 16 | 32
    d = cfg.detectors
    assert not (d.consecutive_errors or d.error_repeat or d.compaction_storm)
    assert d.generic_repeat and d.known_poll_no_progress and d.ping_pong  # the reference's own
    assert not cfg.agent_cycles.enabled  # loops between agents: no such rule in the reference


def test_an_explicit_switch_wins_over_compat():
    cfg = resolve(
        {
            "compat": "openclaw",
            "deviations": {"maskExecOutput": True},
            "detectors": {"errorRepeat": True},
        }
    )
    on = {name for name, value in switch_values(cfg.deviations).items() if value}
    assert on == {"maskExecOutput"}
    assert cfg.detectors.error_repeat and not cfg.detectors.consecutive_errors
    cycles = {"compat": "openclaw", "agentCycles": {"enabled": True, "warnAfter": 4}}
    assert resolve(cycles).agent_cycles.enabled
    assert not resolve({"compat": "openclaw", "agentCycles": {"warnAfter": 4}}).agent_cycles.enabled
    assert resolve({"deviations": {"bareResults": False}}).deviations.bare_results is False


def test_switches_merge_per_agent_field_by_field():
    fleet = fleet_from_document(
        {
            "tools": {"loopDetection": {"compat": "openclaw", "deviations": {"bareResults": True}}},
            "agents": {
                "list": [
                    {
                        "id": "a",
                        "tools": {"loopDetection": {"deviations": {"escalateBlocks": True}}},
                    },
                    {"id": "b", "tools": {"loopDetection": {"compat": "loopguard"}}},
                ]
            },
        }
    )
    a = switch_values(fleet.for_agent("a").deviations)
    assert {name for name, on in a.items() if on} == {"bareResults", "escalateBlocks"}
    b = switch_values(fleet.for_agent("b").deviations)
    assert {name for name, on in b.items() if not on} == set()  # bareResults stays on too


@pytest.mark.parametrize(
    ("block", "where"),
    [
        ({"compat": "OpenClaw"}, "tools.loopDetection.compat"),
        ({"compat": True}, "tools.loopDetection.compat"),
        ({"deviations": {"maskExec": False}}, "tools.loopDetection.deviations.maskExec"),
        ({"deviations": {"bareResults": "no"}}, "tools.loopDetection.deviations.bareResults"),
        ({"deviations": []}, "tools.loopDetection.deviations"),
        ({"detectors": {"compactionStorm": 0}}, "tools.loopDetection.detectors.compactionStorm"),
    ],
)
def test_bad_values_are_refused_with_the_fields_path(block, where):
    with pytest.raises(ConfigError, match=f"^{where.replace('.', '[.]')}: "):
        resolve(block)


def test_agent_paths_name_the_agent():
    doc = {"agents": {"list": [{"id": "x", "tools": {"loopDetection": {"compat": "oc"}}}]}}
    with pytest.raises(ConfigError, match=r"agents\.list\[0\]\.tools\.loopDetection\.compat"):
        fleet_from_document(doc)


def test_version_counts_switches_only_off_the_default():
    base = resolve({}).version
    assert resolve({"compat": "loopguard"}).version == base
    assert resolve({"deviations": dict.fromkeys(SWITCHES, True)}).version == base
    assert resolve({"detectors": {"compactionStorm": True}}).version == base
    assert resolve({"compat": "openclaw"}).version != base
    # the version names the behaviour: compat and every switch written out are one config
    explicit = {
        "deviations": ALL_OFF,
        "detectors": dict.fromkeys(DETECTOR_SWITCHES, False),
        "agentCycles": {"enabled": False},
    }
    assert resolve(explicit).version == resolve({"compat": "openclaw"}).version
    versions = {resolve({"deviations": {name: False}}).version for name in SWITCHES}
    assert len(versions) == len(SWITCHES) and base not in versions


# -- behaviour -------------------------------------------------------------------------------

LOOP = {
    "enabled": True,
    "historySize": 20,
    "warningThreshold": 2,
    "criticalThreshold": 3,
    "globalCircuitBreakerThreshold": 4,
}


def looping(run: Run, times: int) -> list:
    decided = []
    for _ in range(times):
        decided += run.call("read", {"path": "a"})
        decided += run.result("read", {"path": "a"}, text_result("same"))
    return decided


def test_without_escalation_every_critical_is_a_one_call_block():
    run = Run(loop_guard(**LOOP, deviations={"escalateBlocks": False}, abortAfterBlocks=1))
    decided = looping(run, 8)
    assert {d.action for d in decided if d.severity == "critical"} == {Action.BLOCK}
    shipped = Run(loop_guard(**LOOP, abortAfterBlocks=1))
    assert Action.ABORT in {d.action for d in looping(shipped, 8)}


def test_without_the_veto_as_outcome_a_blocked_call_goes_unrecorded():
    """The reference's freeze: the blocked call is not recorded and its veto is no outcome,
    so the same block repeats at the same count and the breaker never fires."""
    run = Run(loop_guard(**LOOP, compat="openclaw"))
    decided = looping(run, 3)
    counts = []
    for _ in range(4):
        decided = run.call("read", {"path": "a"})
        counts += [(d.detector, d.count, d.action) for d in decided]
        run.result("read", {"path": "a"}, VETO)
    assert counts == [("generic_repeat", 3, Action.BLOCK)] * 4
    shipped = Run(loop_guard(**LOOP, abortAfterBlocks=100))
    looping(shipped, 3)
    seen = []
    for _ in range(4):
        seen += [d.detector for d in shipped.call("read", {"path": "a"})]
        shipped.result("read", {"path": "a"}, VETO)
    assert "global_circuit_breaker" in seen


# A block at an identical-outcome streak of 2, in a window of 3 calls.
SMALL_WINDOW = {
    "enabled": True,
    "historySize": 3,
    "warningThreshold": 1,
    "criticalThreshold": 2,
    "globalCircuitBreakerThreshold": 3,
}


def blocked_calls(mode: str, vetoed: bool) -> list[tuple[str, int]]:
    """Under compat: two identical outcomes, then three calls of the same args with no
    result, each vetoed or not; (severity, count) of each of the three."""
    run = Run(loop_guard(**SMALL_WINDOW, compat="openclaw", mode=mode))
    looping(run, 2)
    seen = []
    for _ in range(3):
        seen += [(d.severity, d.count) for d in run.call("read", {"path": "a"})]
        if vetoed:
            run.result("read", {"path": "a"}, VETO)
    return seen


def test_a_blocked_call_that_runs_anyway_takes_its_slot_in_the_window():
    """Issue 38: the reference records a call once its loop check lets it through, so a
    block that is not enforced (observe mode, a gateway that lets the call run: no veto
    follows the call) leaves a recorded call with no result, which pushes the oldest outcome
    out of the window: the streak drops below the block. A vetoed call is never recorded."""
    ran = [("critical", 2), ("critical", 2), ("warning", 3)]
    assert blocked_calls("observe", vetoed=False) == ran
    assert blocked_calls("enforce", vetoed=False) == ran
    assert blocked_calls("enforce", vetoed=True) == [("critical", 2)] * 3


def test_a_held_call_survives_the_state_round_trip():
    """The blocked call waits in the run's state for the next event: a worker that restores
    the state in between decides as one that did not."""
    block = {**SMALL_WINDOW, "compat": "openclaw"}
    plain, restored = Run(loop_guard(**block)), Run(loop_guard(**block))
    for run in (plain, restored):
        looping(run, 2)
        assert run.call("read", {"path": "a"})[0].severity == "critical"
    state = restored.lg.runs[restored.run_id]
    data = json.loads(json.dumps(state.to_dict()))
    assert data["held"][:2] == ["read", state.held.sig]
    restored.lg.runs[restored.run_id] = RunState.from_dict(data)
    for _ in range(2):
        assert restored.call("read", {"path": "a"}) == plain.call("read", {"path": "a"})
    looping(plain, 1)
    assert "held" not in plain.lg.runs[plain.run_id].to_dict()  # settled: nothing held
