"""The pure core agrees with a straightforward re-statement of the reference rules
(``reference_model``) over generated streams (``agreement_streams``), in two modes.

Default mode: loopguard as shipped against the model restating loopguard's deviations (see
its docstring). Deviations the model does not restate are kept out: escalation of repeated
blocks is switched off by config (``abortAfterBlocks`` out of reach); blocks recorded as
outcomes never arise (the generated gateway never answers with the loop veto) and a stream is
compared only up to its first critical verdict, after which the reference would have stopped
the tool; exec output masking never applies (generated exec output has no digits) and
``update_plan`` is not generated.

Compat mode (issue 29): loopguard under ``compat: "openclaw"`` against the model as the
reference alone, over streams that also carry clock times in exec output and reworded
plans. Nothing is kept out: every event is compared, through blocks (a blocked call the
gateway vetoes goes unrecorded on both sides; one that runs anyway, as in ``mode:
"observe"``, is recorded at call time, issue 38), up to an abort; the action (warn, block,
abort) is compared too.

Warnings are compared call by call, severity, detector and count.
"""

from __future__ import annotations

from typing import Any

from core_helpers import loop_guard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit.core.agreement_streams import streams
from unit.core.reference_model import VETO_JSON, Config, ReferenceRun, Verdict

from streams.core.deviations import DETECTOR_SWITCHES, SWITCHES
from streams.core.engine import LoopGuard
from streams.core.events import (
    AgentEvent,
    CompactionRetry,
    Decision,
    ToolCall,
    ToolResult,
)

NO_ESCALATION = 1_000_000
# Issue 38's rules that see progress are not restated by the model: kept out of default mode
# (tests/unit/core/test_progress.py has them); compat mode has them off as the reference.
NO_PROGRESS_RULES = {"unchangedOutcome": False, "repeatedCycle": False}

CONFIGS: list[dict[str, Any]] = [
    {
        "enabled": True,
        "historySize": 8,
        "warningThreshold": 2,
        "criticalThreshold": 4,
        "globalCircuitBreakerThreshold": 6,
        "unknownToolThreshold": 2,
        "postCompactionGuard": {"windowSize": 2},
    },
    {
        "enabled": True,
        "historySize": 5,
        "warningThreshold": 3,
        "criticalThreshold": 3,  # raised to 4
        "globalCircuitBreakerThreshold": 2,  # raised to 5
        "unknownToolThreshold": 3,
    },
    {
        "enabled": True,
        "historySize": 12,
        "warningThreshold": 3,
        "criticalThreshold": 6,
        "globalCircuitBreakerThreshold": 9,
        "detectors": {"pingPong": False},
        "postCompactionGuard": {"windowSize": 4},
    },
    {
        "enabled": True,
        "historySize": 10,
        "warningThreshold": 2,
        "criticalThreshold": 5,
        "globalCircuitBreakerThreshold": 7,
        "detectors": {"genericRepeat": False, "knownPollNoProgress": False},
    },
    {
        "enabled": True,
        "historySize": 10,
        "warningThreshold": 4,
        "criticalThreshold": 8,
        "unknownToolThreshold": 6,
        "consecutiveErrors": {"warningThreshold": 2, "criticalThreshold": 4},
        "errorRepeatThreshold": 2,
    },
    {
        "enabled": True,
        "historySize": 10,
        "warningThreshold": 3,
        "criticalThreshold": 6,
        "consecutiveErrors": {"warningThreshold": 3, "criticalThreshold": 3},  # raised to 4
        "detectors": {"errorRepeat": False},
    },
    {
        "enabled": True,
        "historySize": 10,
        "warningThreshold": 2,
        "criticalThreshold": 3,
        "globalCircuitBreakerThreshold": 4,
        # only the breaker can stop a ping-pong (and it counts one in default mode only)
        "detectors": {"genericRepeat": False, "pingPong": False},
    },
    {"historySize": 6, "postCompactionGuard": {"windowSize": 2}},  # guard only
    {"enabled": False},  # nothing at all
]


def vetoes(call: ToolCall, following: AgentEvent | None) -> bool:
    """Whether ``following`` is the gateway's veto of ``call``: a gateway that enforces a
    block publishes the veto as the call's result right after it."""
    return (
        isinstance(following, ToolResult)
        and following.tool_name == call.tool_name
        and following.tool_call_id == call.tool_call_id
        and following.result_json == VETO_JSON
        and following.error is None
    )


def with_next(events: list[AgentEvent]) -> list[tuple[AgentEvent, AgentEvent | None]]:
    """Each event with the one after it (None for the last)."""
    return list(zip(events, [*events[1:], None], strict=True))


def reference_verdicts(
    model: ReferenceRun, event: AgentEvent, following: AgentEvent | None = None
) -> Verdict | None:
    """The model's verdict on ``event``; ``following`` (the next event) says whether a block
    of a call was enforced."""
    if isinstance(event, ToolCall):
        assert event.args_json is not None
        enforced = vetoes(event, following)
        return model.call(event.tool_name, event.args_json, event.tool_call_id, enforced)
    if isinstance(event, ToolResult):
        return model.result(
            event.tool_name, event.args_json, event.result_json, event.error, event.tool_call_id
        )
    if isinstance(event, CompactionRetry):
        return model.compaction()
    return None


# The reference's action per critical detector: the post-compaction guard aborts the run,
# every call detector blocks that one call (loopguard's own rules are off in compat mode).
ABORTS = {"post_compaction_guard"}


def reference_action(verdict: Verdict) -> str:
    level, detector, _ = verdict
    if level == "warning":
        return "warn"
    return "abort" if detector in ABORTS else "block"


def compat_guard(block: dict[str, Any], **switched_on: bool) -> LoopGuard:
    """loopguard under ``compat: "openclaw"``, with any ``deviations`` switched back on."""
    deviations = {k: v for k, v in switched_on.items() if k in SWITCHES}
    detectors = {**block.get("detectors", {})}
    detectors.update({k: v for k, v in switched_on.items() if k in DETECTOR_SWITCHES})
    return loop_guard(**{**block, "detectors": detectors}, compat="openclaw", deviations=deviations)


def verdicts(decisions: list[Decision], with_action: bool) -> list[tuple[Any, ...]]:
    if with_action:
        return [(d.severity, d.detector, d.count, d.action.value) for d in decisions]
    return [(d.severity, d.detector, d.count) for d in decisions]


def compare(block: dict[str, Any], events: list[AgentEvent]) -> int:
    """Default mode: feed both; assert they agree event by event up to the first critical.
    Returns how many events were compared."""
    lg = loop_guard(
        **{**block, "detectors": {**block.get("detectors", {}), **NO_PROGRESS_RULES}},
        abortAfterBlocks=NO_ESCALATION,
    )
    model = ReferenceRun(Config.from_block(block))
    for compared, (event, following) in enumerate(with_next(events)):
        expected = reference_verdicts(model, event, following)
        got = verdicts(lg.process(event), with_action=False)
        want = [] if expected is None else [expected]
        assert got == want, f"event {compared} (seq {event.envelope.seq}): {event!r}"
        if any(level == "critical" for level, _, _ in want):
            return compared + 1  # the reference stops the tool here; blocks differ on
    return len(events)


def reference_run(block: dict[str, Any], events: list[AgentEvent]) -> list[list[tuple[Any, ...]]]:
    """The reference's verdicts on each event (with its action), up to the first abort."""
    model = ReferenceRun(Config.from_block(block, loopguard=False))
    wants: list[list[tuple[Any, ...]]] = []
    for event, following in with_next(events):
        expected = reference_verdicts(model, event, following)
        wants.append([] if expected is None else [(*expected, reference_action(expected))])
        if expected is not None and reference_action(expected) == "abort":
            break
    return wants


def agreement(
    lg: LoopGuard, events: list[AgentEvent], wants: list[list[tuple[Any, ...]]]
) -> tuple[int, int]:
    """(events compared, events whose verdicts agree, the action included) of ``lg`` against
    the reference's ``wants``, up to an abort on either side: every call, and any other event
    either side decided something on."""
    compared = agreed = 0
    for event, want in zip(events, wants, strict=False):
        got = verdicts(lg.process(event), with_action=True)
        if isinstance(event, ToolCall) or got or want:
            compared += 1
            agreed += got == want
        if any(v[-1] == "abort" for v in got + want):
            break  # the run ends here on one side at least
    return compared, agreed


AGREEMENT = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@AGREEMENT
@given(st.integers(0, len(CONFIGS) - 1), streams())
def test_core_agrees_with_the_reference_rules(ci, events):
    compare(CONFIGS[ci], events)


@AGREEMENT
@given(st.integers(0, len(CONFIGS) - 1), st.booleans(), st.data())
def test_compat_mode_gives_the_references_verdicts_call_by_call(ci, observe, data):
    """compat: "openclaw" is the reference, call by call: 100% of calls agree, through
    blocks a gateway vetoes and blocks it lets run (in observe mode, every one)."""
    block = {**CONFIGS[ci], "mode": "observe"} if observe else CONFIGS[ci]
    events = data.draw(streams(reference_only=True, vetoes=not observe))
    lg = compat_guard(block)
    model = ReferenceRun(Config.from_block(block, loopguard=False))
    for compared, (event, following) in enumerate(with_next(events)):
        expected = reference_verdicts(model, event, following)
        got = verdicts(lg.process(event), with_action=True)
        want = [] if expected is None else [(*expected, reference_action(expected))]
        assert got == want, f"event {compared} (seq {event.envelope.seq}): {event!r}"
        if any(v[-1] == "abort" for v in want):
            return


def sample(reference_only: bool, examples: int = 300) -> list[tuple[int, list[AgentEvent]]]:
    """A fixed sample of (config index, stream), the same on every run."""
    found: list[tuple[int, list[AgentEvent]]] = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True)
    @given(st.integers(0, len(CONFIGS) - 1), streams(reference_only=reference_only))
    def collect(ci, events):
        found.append((ci, events))

    collect()
    return found


def test_every_switch_on_its_own_changes_verdicts_the_streams_reach():
    """Each deviation switched back on alone, over compat mode, moves some call's verdict
    away from the reference's: the switches are real, and the generated streams reach every
    one of them (so the 100% above is not 100% of streams where nothing could differ)."""
    runs = [(ci, events, reference_run(CONFIGS[ci], events)) for ci, events in sample(True, 600)]
    unmoved = []
    # repeatedCycle needs three identical rounds of a 3- or 4-call cycle, burstRepeat calls
    # with turn ids and errorAcrossRuns several runs of a session in session scope, which the
    # generated streams do not reach; test_progress.py, test_bursts.py and
    # test_session_repeats.py switch them on over compat mode by hand.
    unreached = ("repeatedCycle", "burstRepeat", "errorAcrossRuns")
    for switch in [*SWITCHES, *(name for name in DETECTOR_SWITCHES if name not in unreached)]:
        moved = 0
        fleets = [compat_guard(block, **{switch: True}).fleet for block in CONFIGS]
        for ci, events, wants in runs:
            compared, agreed = agreement(LoopGuard(fleets[ci]), events, wants)
            moved += compared - agreed
        if not moved:
            unmoved.append(switch)
    assert unmoved == [], unmoved


def test_the_generator_reaches_every_verdict():
    """The agreement test is only as good as its streams: they must hit every detector."""
    seen: set[tuple[str, str]] = set()
    for ci, events in sample(reference_only=False):
        lg = loop_guard(**CONFIGS[ci], abortAfterBlocks=NO_ESCALATION)
        for event in events:
            seen.update((d.severity, d.detector) for d in lg.process(event))
    assert {
        ("warning", "generic_repeat"),
        ("critical", "generic_repeat"),
        ("warning", "ping_pong"),
        ("warning", "known_poll_no_progress"),
        ("critical", "unknown_tool_repeat"),
        ("critical", "global_circuit_breaker"),
        ("critical", "post_compaction_guard"),
        ("critical", "error_repeat"),
        ("critical", "compaction_storm"),
        ("warning", "consecutive_errors"),
        ("critical", "consecutive_errors"),
    } <= seen
