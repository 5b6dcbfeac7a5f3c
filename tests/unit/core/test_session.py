"""Session scope (issue 17): a loop's counts survive a new run of the same session.

OpenClaw can start a new run of a session on compaction; with per-run counts a loop ran 248
calls over 14 hours. These tests split loops over two runs of one session.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_helpers import SMALL_LIMITS, Run, fleet, loop_guard, text_result
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from streams.core.config import ConfigError, resolve
from streams.core.engine import LoopGuard
from streams.core.events import Action, AgentEvent, Decision
from streams.core.reorder import REORDER_LIMIT
from tests.unit.core.test_run_state import run_events

LOOP = {"enabled": True, "warningThreshold": 5, "criticalThreshold": 8}
SAME = text_result("same page")


def session_runs(lg: LoopGuard, first: str | None = "user", second: str | None = "compaction"):
    """Run A of session S, then run B of S a minute later (as a compaction's new run follows,
    within ``sessionGapSeconds``); each starts with RunStarted(trigger)."""
    a = Run(lg, run_id="A", session_id="S")
    b = Run(lg, run_id="B", session_id="S", start_time=a.start_time + 60_000)
    a.start(first)
    return a, b, second


def loop_pairs(run: Run, n: int, tool: str = "read", args: dict[str, Any] | None = None) -> None:
    for i in range(n):
        run.call(tool, args or {"path": "/x"}, f"{run.run_id}-{i}")
        run.result(tool, args or {"path": "/x"}, SAME, call_id=f"{run.run_id}-{i}")


def actions(decisions: list[Decision]) -> list[tuple[str, str, int]]:
    return [(d.action.value, d.detector, d.count) for d in decisions]


def test_a_loop_split_over_two_runs_is_blocked_in_session_scope():
    lg = loop_guard(**LOOP, scope="session")
    a, b, trigger = session_runs(lg)
    loop_pairs(a, 5)
    a.end()
    assert a.decisions == []  # four earlier calls at most: below the warning
    b.start(trigger)
    loop_pairs(b, 5)
    # B's calls continue A's five: counts 5, 6, 7 warn, 8 blocks
    assert actions(b.decisions) == [
        ("warn", "generic_repeat", 5),
        ("warn", "generic_repeat", 6),
        ("warn", "generic_repeat", 7),
        ("block", "generic_repeat", 8),
        ("block", "generic_repeat", 9),
    ]
    assert all(d.run_id == "B" for d in b.decisions)


def test_the_same_split_loop_is_not_caught_in_run_scope():
    lg = loop_guard(**LOOP)  # scope defaults to "run"
    a, b, trigger = session_runs(lg)
    loop_pairs(a, 5)
    a.end()
    b.start(trigger)
    loop_pairs(b, 5)
    assert a.decisions == [] and b.decisions == []


@pytest.mark.parametrize("trigger", ["heartbeat", "cron"])
def test_heartbeat_and_cron_runs_start_fresh(trigger):
    lg = loop_guard(**LOOP, scope="session")
    a, b, _ = session_runs(lg)
    loop_pairs(a, 5)
    b.start(trigger)
    loop_pairs(b, 5)
    assert b.decisions == []
    assert len(lg.runs["B"].history) == 5  # its own five calls only


def test_fresh_triggers_are_configurable():
    lg = loop_guard(**LOOP, scope="session", sessionFreshTriggers=["cron"])
    a, b, _ = session_runs(lg)
    loop_pairs(a, 5)
    b.start("heartbeat")  # no longer fresh
    loop_pairs(b, 5)
    assert [d.action for d in b.decisions].count(Action.BLOCK) == 2


def test_a_run_without_run_started_carries_over():
    lg = loop_guard(**LOOP, scope="session")
    a, b, _ = session_runs(lg)
    loop_pairs(a, 5)
    loop_pairs(b, 5)  # its RunStarted was lost: the trigger is unknown, so not fresh
    assert [d.action for d in b.decisions].count(Action.BLOCK) == 2


def test_runs_of_other_sessions_or_none_do_not_carry():
    lg = loop_guard(**LOOP, scope="session")
    a = Run(lg, run_id="A", session_id="S")
    other = Run(lg, run_id="O", session_id="T")
    bare = Run(lg, run_id="N")
    loop_pairs(a, 5)
    loop_pairs(other, 5)
    loop_pairs(bare, 5)
    assert other.decisions == [] and bare.decisions == []


def test_blocks_carry_over_and_escalate_to_abort():
    lg = loop_guard(**LOOP, scope="session", abortAfterBlocks=3)
    a, b, trigger = session_runs(lg)
    loop_pairs(a, 10)  # counts 8 and 9 block: two blocks
    assert [d.action for d in a.decisions].count(Action.BLOCK) == 2
    a.end()
    b.start(trigger)
    b.call("read", {"path": "/x"}, "B-0")
    last = b.decisions[-1]
    assert (last.action, last.error_code) == (Action.ABORT, "loop_persisted_after_block")
    assert last.extra == {"blocks": "3"}


def test_the_post_compaction_guard_count_carries_over():
    lg = loop_guard(scope="session", postCompactionGuard={"windowSize": 3})
    a, b, trigger = session_runs(lg)
    a.compaction()
    loop_pairs(a, 2)
    assert a.decisions == []
    # the compaction started a new run of the session: its third identical outcome aborts
    b.start(trigger)
    loop_pairs(b, 1)
    assert [(d.action, d.error_code) for d in b.decisions] == [
        (Action.ABORT, "compaction_loop_persisted")
    ]


def test_the_error_streak_carries_over():
    block = {"enabled": True, "consecutiveErrors": {"warningThreshold": 3, "criticalThreshold": 5}}
    lg = loop_guard(**block, scope="session")
    a, b, trigger = session_runs(lg)
    for i in range(3):
        a.call("fetch", {"url": f"/u{i}"}, f"a{i}")
        a.result("fetch", {"url": f"/u{i}"}, error="timeout", call_id=f"a{i}")
    b.start(trigger)
    b.call("fetch", {"url": "/v"}, "b0")
    assert actions(b.decisions) == [("warn", "consecutive_errors", 3)]


def test_seqs_buffer_stats_and_recent_decisions_start_fresh():
    lg = loop_guard(**LOOP, scope="session")
    a, b, trigger = session_runs(lg)
    loop_pairs(a, 9)
    a.end()
    b.start(trigger)
    state = lg.runs["B"]
    assert (state.last_seq, state.stats.events, list(state.recent)) == (1, 1, [])
    assert state.status == "active" and state.session_id == "S"
    assert state.blocks == lg.runs["A"].blocks == 1
    assert lg.runs["A"].status == "ended"  # the previous run itself is left as it was


def test_a_state_round_trip_keeps_the_session_and_only_writes_it_when_set():
    lg = loop_guard(**LOOP, scope="session")
    a, _, _ = session_runs(lg)
    loop_pairs(a, 2)
    data = lg.runs["A"].to_dict()
    assert data["session_id"] == "S"
    assert type(lg.runs["A"]).from_dict(data).to_dict() == data
    plain = Run(lg, run_id="P")
    plain.start()
    assert "session_id" not in lg.runs["P"].to_dict()


def test_a_heartbeat_run_start_delivered_late_still_starts_fresh():
    """Seeding happens at the first event *processed* (seq order), not the first to arrive."""
    lg = loop_guard(**LOOP, scope="session")
    a, _, _ = session_runs(lg)
    loop_pairs(a, 5)
    b = Run(None, run_id="B", session_id="S", time_step=10)  # within the reorder wait
    start = b.make_start("heartbeat")
    rest = []
    for i in range(5):
        rest.append(b.make_call("read", {"path": "/x"}, f"B-{i}"))
        rest.append(b.make_result("read", {"path": "/x"}, SAME, call_id=f"B-{i}"))
    out = [d for event in [*rest, start] for d in lg.process(event)]
    assert out == []
    assert len(lg.runs["B"].history) == 5


# -- config --------------------------------------------------------------------------------


def test_scope_and_fresh_triggers_are_validated_with_the_field_path():
    with pytest.raises(ConfigError, match=r'^tools\.loopDetection\.scope: expected "run" or'):
        resolve({"scope": "conversation"})
    with pytest.raises(ConfigError, match=r"sessionFreshTriggers: expected a list"):
        resolve({"sessionFreshTriggers": "heartbeat"})
    with pytest.raises(ConfigError, match=r"sessionFreshTriggers\[1\]: expected a non-empty"):
        resolve({"sessionFreshTriggers": ["cron", ""]})


def test_scope_is_part_of_the_config_version_and_merges_per_agent():
    default = resolve({})
    assert resolve({"scope": "run"}).version == default.version  # the default, spelt out
    assert resolve({"sessionFreshTriggers": ["cron", "heartbeat"]}).version == default.version
    session = resolve({"scope": "session"})
    assert session.version != default.version
    assert resolve({"scope": "session", "sessionFreshTriggers": []}).version != session.version
    doc = {
        "tools": {"loopDetection": {"scope": "session", "sessionFreshTriggers": ["cron"]}},
        "agents": {"list": [{"id": "coder", "tools": {"loopDetection": {"scope": "run"}}}]},
    }
    fl = fleet(doc)
    coder, other = fl.for_agent("coder"), fl.for_agent("other")
    assert (coder.scope, coder.session_fresh_triggers) == ("run", ("cron",))
    assert (other.scope, other.session_fresh_triggers) == ("session", ("cron",))
    assert coder.version != other.version


def test_an_agent_in_run_scope_does_not_carry_in_a_session_scoped_fleet():
    lg = LoopGuard(
        fleet(
            {
                "tools": {"loopDetection": {**LOOP, "scope": "session"}},
                "agents": {
                    "list": [{"id": "agent-1", "tools": {"loopDetection": {"scope": "run"}}}]
                },
            }
        )
    )
    a, b, trigger = session_runs(lg)
    loop_pairs(a, 5)
    b.start(trigger)
    loop_pairs(b, 5)
    assert b.decisions == []


# -- properties ----------------------------------------------------------------------------

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SESSION_CONFIG = {**SMALL_LIMITS, "scope": "session"}


def in_session(events: list[AgentEvent], session_id: str) -> list[AgentEvent]:
    from dataclasses import replace

    return [replace(e, envelope=replace(e.envelope, session_id=session_id)) for e in events]


def run_all(config: dict[str, Any], events: list[AgentEvent]) -> tuple[list[Decision], LoopGuard]:
    lg = loop_guard(**config)
    return [d for event in events for d in lg.process(event)], lg


@SETTINGS
@given(
    run_events("A", max_ops=30),
    run_events("B", max_ops=30),
    st.lists(st.integers(0, REORDER_LIMIT - 1), min_size=60, max_size=60),
)
def test_the_second_run_decides_the_same_whatever_its_delivery_order(a, b, offsets):
    a, b = in_session(a, "S"), in_session(b, "S")
    in_order, lg_in = run_all(SESSION_CONFIG, a + b)
    keyed = sorted(
        ((e.envelope.seq + off, i, e) for i, (e, off) in enumerate(zip(b, offsets, strict=False))),
        key=lambda k: k[:2],
    )
    shuffled, lg_out = run_all(SESSION_CONFIG, a + [k[-1] for k in keyed])
    key = lambda d: (d.run_id, d.seq, d.detector)  # noqa: E731
    assert sorted(shuffled, key=key) == sorted(in_order, key=key)
    assert lg_out.runs["B"].history.to_list() == lg_in.runs["B"].history.to_list()


@SETTINGS
@given(run_events("A", max_ops=30), run_events("B", max_ops=30))
def test_a_seeded_run_decides_as_the_previous_run_would_have_gone_on(a, b):
    """In session scope B decides exactly what one run made of A's events followed by B's
    (renumbered) would decide after A's: the window, streaks, guard and blocks go on. Without
    a session id, or in run scope, nothing carries."""
    from dataclasses import replace

    plain, _ = run_all(SESSION_CONFIG, a + b)
    run_scope, _ = run_all({**SESSION_CONFIG, "scope": "run"}, in_session(a + b, "S"))
    unversioned = lambda ds: [replace(d, config_version="") for d in ds]  # noqa: E731
    assert unversioned(plain) == unversioned(run_scope)  # scope is in the version, nothing else
    _, lg = run_all(SESSION_CONFIG, in_session(a, "S"))
    assume(lg.runs["A"].status == "active")  # an aborted run stays aborted as one run
    seeded = [d for event in in_session(b, "S") for d in lg.process(event)]
    shift = len(a)
    as_one = [
        replace(e, envelope=replace(e.envelope, run_id="A", seq=e.envelope.seq + shift)) for e in b
    ]
    _, one = run_all(SESSION_CONFIG, in_session(a, "S"))
    continued = [d for event in as_one for d in one.process(event)]
    assert seeded == [replace(d, run_id="B", seq=d.seq - shift) for d in continued]
