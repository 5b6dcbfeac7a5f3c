"""RunState / RunHistory properties: determinism, delivery-order independence, persistence
round trips, incremental history == rebuilt history == a naive port of the reference
algorithms, "changing results never abort", run isolation, and gap handling."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from core_helpers import (
    SMALL_LIMITS,
    VETO,
    Run,
    exec_result,
    loop_guard,
    one,
    poll_result,
    sent_result,
    text_result,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core.config import resolve
from streams.core.engine import LoopGuard
from streams.core.events import AgentEvent, Decision
from streams.core.hashing import Outcome, args_hash
from streams.core.history import RunHistory
from streams.core.reorder import REORDER_LIMIT, REORDER_MAX_WAIT_MS
from streams.core.run_state import RunState

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# A small pool so that loops (repeats, ping-pong, unknown tools) actually happen.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read", {"path": "a"}),
    ("read", {"path": "b"}),
    ("write", {"path": "a", "content": "x"}),
    ("process", {"action": "poll", "sessionId": "s1"}),
    ("exec", {"command": "make"}),
    ("browser", {"url": "u"}),
    ("message", {"action": "send", "text": "hi"}),
]
RESULTS: list[tuple[Any, str | None]] = [
    (text_result("A"), None),
    (text_result("B"), None),
    (poll_result("running", ""), None),
    (exec_result("2024-01-01T00:00:01Z fail", exit_code=1), None),
    (sent_result("hi", "m-1"), None),
    (sent_result("hi", "m-2"), None),
    ({"ok": True, "messageId": "m-3"}, None),  # bare results (issue 17)
    ("ok\n", None),
    (None, "Unknown tool: browser"),
    (None, "boom"),
    (VETO, None),
    (None, None),
]

CONFIGS = [
    SMALL_LIMITS,
    {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5, "abortAfterBlocks": 50},
    {"historySize": 4},  # rolling detectors off, compaction guard on
    # the reference's rules: blocked calls are held until the next event (held_call.py)
    {**SMALL_LIMITS, "compat": "openclaw"},
]


@st.composite
def run_events(draw, run_id: str = "r1", max_ops: int = 50, distinct_results: bool = False):
    """A plausible event list for one run, in seq order: calls (some parallel, with or
    without call ids), results arriving out of order, compactions. Events are 50 ms of event
    time apart, so a delivery delay of up to REORDER_LIMIT - 1 events stays within
    REORDER_MAX_WAIT_MS and the order-independence tests test the count bound."""
    run = Run(None, run_id=run_id, agent_id="agent", time_step=50)
    pending: list[tuple[str, dict[str, Any], str | None]] = []
    recent: list[int] = []  # call pool indices, newest last: loops repeat these
    sticky: dict[str, int] = {}  # each tool keeps answering the same until it changes
    n_ops = draw(st.integers(1, max_ops))
    unique = 0
    for _ in range(n_ops):
        kind = draw(st.integers(0, 11))
        if kind <= 5 or (kind <= 9 and not pending):
            if kind <= 3 and len(recent) >= 2:  # repeat (kind 0-1) or ping-pong (kind 2-3)
                which = recent[-1] if kind <= 1 else recent[-2]
            else:
                which = draw(st.integers(0, len(CALLS) - 1))
            recent.append(which)
            tool, args = CALLS[which]
            call_id = f"{run_id}-c{run.seq + 1}" if draw(st.booleans()) else None
            run.make_call(tool, args, call_id)
            pending.append((tool, args, call_id))
        elif kind <= 9:
            newest = draw(st.booleans())
            tool, args, call_id = pending.pop(
                -1 if newest else draw(st.integers(0, len(pending) - 1))
            )
            if distinct_results:
                unique += 1
                result, error = text_result(f"{run_id}-out-{unique}", n=unique), None
            else:
                if tool not in sticky or draw(st.integers(0, 3)) == 0:
                    sticky[tool] = draw(st.integers(0, len(RESULTS) - 1))
                result, error = RESULTS[sticky[tool]]
            # args omitted: with a call id, or now and then with neither (issue 17)
            omit_args = draw(st.booleans()) and (call_id is not None or draw(st.booleans()))
            run.make_result(tool, args, result, error, call_id, omit_args)
        elif kind == 10:
            for _ in range(draw(st.sampled_from([1, 1, 2, 4]))):  # storms too (issue 17)
                run.make_compaction(draw(st.sampled_from(["context_overflow", "manual"])))
        else:  # a result nobody asked for (its call was lost)
            tool, args = CALLS[draw(st.integers(0, len(CALLS) - 1))]
            if distinct_results:
                unique += 1
                result = text_result(f"{run_id}-orphan-{unique}", n=unique)
            else:
                result = RESULTS[draw(st.integers(0, len(RESULTS) - 2))][0]
            run.make_result(tool, args, result)
    return run.events


def process(config: dict[str, Any], events: list[AgentEvent]) -> tuple[list[Decision], LoopGuard]:
    lg = loop_guard(**config)
    out: list[Decision] = []
    for event in events:
        out.extend(lg.process(event))
    return out, lg


def ordered(decisions: list[Decision]) -> list[Decision]:
    return sorted(decisions, key=lambda d: (d.run_id, d.seq, d.detector, d.action.value))


def state_json(lg: LoopGuard, stats: bool = True) -> str:
    states = {}
    for run_id, state in lg.runs.items():
        data = state.to_dict()
        if not stats:
            data.pop("stats")
        states[run_id] = data
    return json.dumps(states, sort_keys=True)


def delivery_keys(events, offsets, duplicates):
    """Arrival keys: an event arrives at ``seq + offset`` (offset < REORDER_LIMIT, so the
    gap buffer never overflows); duplicate copies arrive at ``seq + late``."""
    keyed = [
        (e.envelope.seq + off, e.envelope.run_id, i, e)
        for i, (e, off) in enumerate(zip(events, offsets, strict=False))
    ]
    for j, (index, late) in enumerate(duplicates):
        if events:
            e = events[index % len(events)]
            keyed.append((e.envelope.seq + late, e.envelope.run_id, len(events) + j, e))
    return keyed


def deliver(events, offsets, duplicates):
    return [k[-1] for k in sorted(delivery_keys(events, offsets, duplicates), key=lambda k: k[:3])]


config_index = st.integers(0, len(CONFIGS) - 1)
offsets_for = st.lists(st.integers(0, REORDER_LIMIT - 1), min_size=200, max_size=200)
dupes = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 300)), max_size=15)


def two_runs():
    return st.tuples(run_events("r1"), run_events("r2"), st.lists(st.booleans(), max_size=120))


def interleave(a, b, picks):
    out, i, j = [], 0, 0
    for pick in picks:
        if pick and i < len(a):
            out.append(a[i])
            i += 1
        elif j < len(b):
            out.append(b[j])
            j += 1
    return out + a[i:] + b[j:]


# -- (a) determinism ---------------------------------------------------------------------


@SETTINGS
@given(config_index, two_runs())
def test_determinism(ci, runs):
    a, b, picks = runs
    events = interleave(a, b, picks)
    first, lg1 = process(CONFIGS[ci], events)
    second, lg2 = process(CONFIGS[ci], events)
    assert first == second
    assert state_json(lg1) == state_json(lg2)


# -- (b) delivery order independence -----------------------------------------------------


@SETTINGS
@given(config_index, two_runs(), offsets_for, offsets_for, dupes)
def test_delivery_order_independence(ci, runs, off_a, off_b, duplicates):
    a, b, picks = runs
    in_order, lg_in = process(CONFIGS[ci], interleave(a, b, picks))
    keys = delivery_keys(a, off_a, duplicates) + delivery_keys(b, off_b, duplicates[:3])
    shuffled = [k[-1] for k in sorted(keys, key=lambda k: k[:3])]
    out_of_order, lg_out = process(CONFIGS[ci], shuffled)
    assert {d.decision_id for d in out_of_order} == {d.decision_id for d in in_order}
    assert ordered(out_of_order) == ordered(in_order)
    assert all(not state.waiting for state in lg_out.runs.values())
    assert state_json(lg_out, stats=False) == state_json(lg_in, stats=False)


@SETTINGS
@given(config_index, run_events(), offsets_for)
def test_pure_permutation_gives_byte_identical_state(ci, events, offsets):
    in_order, lg_in = process(CONFIGS[ci], events)
    out_of_order, lg_out = process(CONFIGS[ci], deliver(events, offsets, []))
    assert ordered(out_of_order) == ordered(in_order)
    assert state_json(lg_out) == state_json(lg_in)


# -- (c) persistence round trip mid-stream -----------------------------------------------


@SETTINGS
@given(config_index, two_runs(), offsets_for, st.lists(st.integers(0, 400), max_size=4))
def test_round_trip_mid_stream(ci, runs, offsets, cuts):
    a, b, picks = runs
    events = deliver(interleave(a, b, picks), offsets, [])  # so that some events wait
    expected, lg_plain = process(CONFIGS[ci], events)
    lg = loop_guard(**CONFIGS[ci])
    got: list[Decision] = []
    cut_points = {c % (len(events) + 1) for c in cuts}
    for i, event in enumerate(events):
        if i in cut_points:
            for run_id, state in list(lg.runs.items()):
                data = json.loads(json.dumps(state.to_dict()))
                lg.runs[run_id] = RunState.from_dict(data)
                assert json.dumps(lg.runs[run_id].to_dict(), sort_keys=True) == json.dumps(
                    data, sort_keys=True
                )
        got.extend(lg.process(event))
    assert got == expected
    assert state_json(lg) == state_json(lg_plain)


# -- (d) incremental history == rebuild == reference algorithms --------------------------

SIGS = [
    ("read", args_hash("read", {"p": 1})),
    ("read", args_hash("read", {"p": 2})),
    ("write", args_hash("write", {"p": 1})),
    ("browser", args_hash("browser", {})),
]
OUTCOMES = [
    Outcome("h1"),
    Outcome("h2"),
    Outcome("error:x", "browser"),
    Outcome("error:y", "other"),
    Outcome(None, loop_veto=True),
    Outcome(None),
]

history_op = st.one_of(
    st.tuples(st.just("call"), st.integers(0, len(SIGS) - 1), st.booleans()),
    st.tuples(st.just("result"), st.integers(0, 1000), st.integers(0, len(OUTCOMES) - 1)),
    st.tuples(st.just("result_by_sig"), st.integers(0, len(SIGS) - 1), st.integers(0, 5)),
    st.tuples(st.just("orphan"), st.integers(0, len(SIGS) - 1), st.integers(0, 5)),
)
history_ops = st.lists(history_op, max_size=60)


def naive_no_progress(records, sig):
    streak, latest = 0, None
    for r in reversed(records):
        if r.sig != sig or r.result_hash is None:
            continue
        if latest is None:
            latest, streak = r.result_hash, 1
        elif r.result_hash != latest:
            break
        else:
            streak += 1
    return streak, latest


def naive_unknown(records, tool):
    streak, name = 0, None
    for r in reversed(records):
        if r.tool_name != tool or r.unknown_tool is None:
            break
        if name is None:
            name, streak = r.unknown_tool, 1
        elif r.unknown_tool != name:
            break
        else:
            streak += 1
    return streak, name


def naive_ping_pong(records, current):
    """Straight port of the reference getPingPongStreak."""
    if not records:
        return 0, False
    last = records[-1]
    other = next((r.sig for r in reversed(records[:-1]) if r.sig != last.sig), None)
    if other is None:
        return 0, False
    tail = 0
    for r in reversed(records):
        if r.sig != (last.sig if tail % 2 == 0 else other):
            break
        tail += 1
    if tail < 2 or current != other:
        return 0, False
    first_a = first_b = None
    evidence = True
    for r in records[len(records) - tail :]:
        if r.result_hash is None:
            evidence = False
            break
        if r.sig == last.sig:
            first_a = first_a or r.result_hash
            if first_a != r.result_hash:
                evidence = False
                break
        else:
            first_b = first_b or r.result_hash
            if first_b != r.result_hash:
                evidence = False
                break
    return tail + 1, evidence and first_a is not None and first_b is not None


def window_derived(history: RunHistory):
    """Derived fields as the window can know them: a pattern reaching past the oldest kept
    record is cut at the window (an incremental history remembers trimmed predecessors,
    a rebuilt one cannot; every query clamps the same way)."""
    records = list(history.records)
    first = records[0].index if records else 0
    out = []
    for pos, r in enumerate(records):
        results_of_sig = sum(
            1 for x in records[: pos + 1] if x.sig == r.sig and x.result_hash is not None
        )
        out.append(
            (
                r.primary(),
                min(r.no_progress_run, results_of_sig),
                min(r.unknown_run, pos + 1),
                min(r.alt_run, pos + 1),
                r.alt_break if r.alt_break >= first else -1,
            )
        )
    return out


def queries(history: RunHistory):
    out = {}
    for tool, sig in SIGS:
        pong = history.ping_pong(sig)
        out[sig] = (
            history.count(sig),
            history.no_progress_streak(sig),
            history.unknown_tool_streak(tool),
            (pong.calls, pong.no_progress, pong.paired_sig if pong.calls else ""),
            history.latest_result_hash(sig),
        )
    return out


def naive_queries(history: RunHistory):
    records = list(history.records)
    out = {}
    for tool, sig in SIGS:
        count, evidence = naive_ping_pong(records, sig)
        out[sig] = (
            sum(1 for r in records if r.sig == sig),
            naive_no_progress(records, sig),
            naive_unknown(records, tool),
            (count, evidence, records[-1].sig if count else ""),
            naive_no_progress(records, sig)[1],
        )
    return out


def apply_history_ops(history: RunHistory, ops, check) -> None:
    for op in ops:
        if op[0] == "call":
            tool, sig = SIGS[op[1]]
            # ids unique across calls of this helper on one history (test_resize_then_continue)
            call_id = f"id{history.next_index + 1}" if op[2] else None
            history.append_call(tool, sig, call_id, False, None)
        elif op[0] == "result":
            pending = [r for r in history.records if r.pending]
            if not pending:
                continue
            record = pending[op[1] % len(pending)]
            if record.tool_call_id:
                found = history.find_pending(record.tool_name, None, record.tool_call_id)
            else:
                found = history.find_pending(record.tool_name, record.sig, None)
                newest = [r for r in pending if r.sig == record.sig][-1]
                assert found is newest  # attaches to the newest pending call of the sig
                record = found
            assert found is record
            history.attach_result(record, OUTCOMES[op[2]])
        elif op[0] == "result_by_sig":
            tool, sig = SIGS[op[1]]
            found = history.find_pending(tool, sig, None)
            if found is not None:
                history.attach_result(found, OUTCOMES[op[2]])
        elif op[0] == "resize":
            history.resize(op[1])
        else:
            tool, sig = SIGS[op[1]]
            history.append_result(tool, sig, None, False, None, OUTCOMES[op[2]])
        check(history)


def check_against_rebuild_and_reference(history: RunHistory) -> None:
    rebuilt = RunHistory.rebuild(history.max_size, history.next_index, history.to_list())
    assert rebuilt.to_list() == history.to_list()
    assert window_derived(rebuilt) == window_derived(history)
    assert queries(history) == queries(rebuilt) == naive_queries(history)
    assert len(history) <= history.max_size
    again = RunHistory.rebuild(rebuilt.max_size, rebuilt.next_index, rebuilt.to_list())
    assert [r.primary() for r in again.records] == [r.primary() for r in rebuilt.records]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([1, 2, 3, 5, 8, 30]), history_ops)
def test_incremental_history_equals_rebuild(max_size, ops):
    apply_history_ops(RunHistory(max_size), ops, check_against_rebuild_and_reference)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 4, 30]), history_ops, st.sampled_from([1, 3, 100]))
def test_resize_then_continue(max_size, ops, new_size):
    history = RunHistory(max_size)
    half = len(ops) // 2
    apply_history_ops(history, ops[:half], lambda h: None)
    history.resize(new_size)
    check_against_rebuild_and_reference(history)
    apply_history_ops(history, ops[half:], check_against_rebuild_and_reference)


@SETTINGS
@given(config_index, run_events())
def test_engine_history_equals_rebuild(ci, events):
    _, lg = process(CONFIGS[ci], events)
    for state in lg.runs.values():
        h = state.history
        rebuilt = RunHistory.rebuild(h.max_size, h.next_index, h.to_list())
        assert window_derived(rebuilt) == window_derived(h)
        sigs = {r.sig: r.tool_name for r in h.records}
        for sig, tool in sigs.items():
            assert h.no_progress_streak(sig) == rebuilt.no_progress_streak(sig)
            assert h.no_progress_streak(sig) == naive_no_progress(list(h.records), sig)
            assert h.unknown_tool_streak(tool) == rebuilt.unknown_tool_streak(tool)
            assert h.ping_pong(sig) == rebuilt.ping_pong(sig)
            assert h.count(sig) == rebuilt.count(sig)


# -- (e) changing results never abort ----------------------------------------------------


@SETTINGS
@given(config_index, run_events(max_ops=80, distinct_results=True))
def test_changing_results_never_abort(ci, events):
    decisions, _ = process(CONFIGS[ci], events)
    # A compaction storm is retries with no outcome between them, whatever the results were:
    # what the run decided up to one is what changing results must never make abort.
    storm = next((i for i, d in enumerate(decisions) if d.detector == "compaction_storm"), None)
    decisions = decisions[:storm]
    assert [d for d in decisions if d.detector == "post_compaction_guard"] == []
    if resolve(CONFIGS[ci]).critical_threshold >= 4:
        # nothing else can block either: no identical outcomes, no proven no-progress loop.
        # (With criticalThreshold 3 a two-call A,B tail blocks as ping-pong: one A result and
        # one B result are vacuously "all identical", exactly as in the reference.)
        assert {d.action.value for d in decisions} <= {"warn"}


# -- (f) run isolation -------------------------------------------------------------------


@SETTINGS
@given(config_index, two_runs())
def test_run_isolation(ci, runs):
    a, b, picks = runs
    together, _ = process(CONFIGS[ci], interleave(a, b, picks))
    alone_a, _ = process(CONFIGS[ci], a)
    alone_b, _ = process(CONFIGS[ci], b)
    assert [d for d in together if d.run_id == "r1"] == alone_a
    assert [d for d in together if d.run_id == "r2"] == alone_b


# -- (g) observe mode decides exactly as enforce mode ------------------------------------


def as_enforced(decision: Decision, version: str) -> Decision:
    return replace(decision, enforced=True, config_version=version)


def state_without_recent(lg: LoopGuard) -> str:
    states = {run_id: {**state.to_dict(), "recent": None} for run_id, state in lg.runs.items()}
    return json.dumps(states, sort_keys=True)


@SETTINGS
@given(config_index, two_runs())
def test_observe_mode_decides_exactly_as_enforce_mode(ci, runs):
    """Shadow mode (issue 17) only marks decisions: the state machine, counts and escalation
    are those of enforce mode on the same events."""
    a, b, picks = runs
    events = interleave(a, b, picks)
    enforced, lg_enforce = process(CONFIGS[ci], events)
    observed, lg_observe = process({**CONFIGS[ci], "mode": "observe"}, events)
    version = lg_enforce.config_for("agent").version
    assert lg_observe.config_for("agent").version != version
    assert all(d.enforced for d in enforced)
    assert not any(d.enforced for d in observed)
    assert [as_enforced(d, version) for d in observed] == enforced
    assert [d.decision_id for d in observed] == [d.decision_id for d in enforced]
    assert state_without_recent(lg_observe) == state_without_recent(lg_enforce)


def test_an_observed_loop_escalates_to_abort_unenforced():
    """Under observe the gateway lets every call run (no veto comes back), and the run still
    shows the blocks and the abort enforcement would have decided."""
    block = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 4, "abortAfterBlocks": 2}
    observed = Run(loop_guard(**block, mode="observe"))
    enforced = Run(loop_guard(**block))
    for run in (observed, enforced):
        for _ in range(8):
            run.plain_cycle("read", {"path": "a"}, text_result("same"))
    assert [(d.action.value, d.detector) for d in observed.decisions] == [
        ("warn", "generic_repeat"),
        ("warn", "generic_repeat"),
        ("block", "generic_repeat"),
        ("abort", "generic_repeat"),
        ("abort", "run_aborted"),
        ("abort", "run_aborted"),
    ]
    assert {d.enforced for d in observed.decisions} == {False}
    assert observed.lg.runs["run-1"].status == "aborted"
    version = enforced.lg.config_for("agent-1").version
    assert [as_enforced(d, version) for d in observed.decisions] == enforced.decisions


def test_observe_state_round_trips_with_its_unenforced_decisions():
    lg = loop_guard(enabled=True, warningThreshold=1, mode="observe")
    run = Run(lg)
    for _ in range(3):
        run.plain_cycle("read", {"path": "a"}, text_result("same"))
    state = lg.runs["run-1"]
    again = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.decisions_for(run.events[-2].envelope.seq) == [run.decisions[-1]]
    assert again.decisions_for(run.events[-2].envelope.seq)[0].enforced is False


def test_enforced_decisions_are_kept_as_before_enforced_existed():
    """An enforce-mode state holds no ``enforced`` key (the changelog bytes do not change),
    and loads its decisions as enforced; an observe-mode one keeps ``enforced: false``."""
    for mode in ("enforce", "observe"):
        lg = loop_guard(enabled=True, warningThreshold=1, mode=mode)
        run = Run(lg)
        for _ in range(3):
            run.plain_cycle("read", {"path": "a"}, text_result("same"))
        data = lg.runs["run-1"].to_dict()
        kept = [decision for _, decisions in data["recent"] for decision in decisions]
        assert kept
        if mode == "enforce":
            assert all("enforced" not in decision for decision in kept)
        else:
            assert all(decision["enforced"] is False for decision in kept)
        seq = run.events[-2].envelope.seq
        assert RunState.from_dict(data).decisions_for(seq) == [run.decisions[-1]]


# -- gaps, duplicates, flush -------------------------------------------------------------

GAP_CONFIG = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 50}


def looping_events(n_cycles: int, time_step: int = 10) -> list[AgentEvent]:
    """Identical read cycles, ``time_step`` ms of event time apart (by default close enough
    that only the count bound releases a gap)."""
    run = Run(None, time_step=time_step)
    for _ in range(n_cycles):
        run.make_call("read", {"path": "a"})
        run.make_result("read", {"path": "a"}, text_result("same"))
    return run.events


def test_missing_seq_holds_later_events_until_the_reorder_limit():
    events = looping_events(40)  # seqs 1..80
    lg = loop_guard(**GAP_CONFIG)
    state_of = lambda: lg.runs["run-1"]  # noqa: E731
    assert lg.process(events[0]) == []
    held = events[2 : 2 + REORDER_LIMIT]  # seqs 3..66; seq 2 is lost
    for event in held:
        assert lg.process(event) == []
    assert state_of().last_seq == 1
    assert len(state_of().waiting) == REORDER_LIMIT
    # one more event than the buffer may hold: the gap is given up, in seq order
    released = lg.process(events[2 + REORDER_LIMIT])
    assert state_of().last_seq == 3 + REORDER_LIMIT
    assert state_of().waiting == {}
    assert state_of().stats.gaps == 1
    assert released and [d.seq for d in released] == sorted(d.seq for d in released)
    assert {d.seq % 2 for d in released} == {1}  # decisions on calls (odd seqs)
    # the lost event finally arrives: too late, dropped
    assert lg.process(events[1]) == []
    assert state_of().stats.duplicates == 1
    # and then the stream simply continues
    assert lg.process(events[3 + REORDER_LIMIT]) == []
    assert lg.process(events[4 + REORDER_LIMIT])[0].seq == 5 + REORDER_LIMIT


def test_gap_release_is_deterministic_whatever_the_order():
    events = looping_events(40)
    kept = [e for e in events if e.envelope.seq not in (2, 10)]
    expected, lg1 = process(GAP_CONFIG, kept)
    reversed_tail = kept[:1] + list(reversed(kept[1:REORDER_LIMIT])) + kept[REORDER_LIMIT:]
    got, lg2 = process(GAP_CONFIG, reversed_tail)
    assert ordered(got) == ordered(expected)
    assert state_json(lg1) == state_json(lg2)


def test_gap_buffer_bounded_under_loss():
    events = looping_events(200)
    kept = [e for i, e in enumerate(events) if i % 7 != 3]  # lose one event in seven
    lg = loop_guard(**GAP_CONFIG)
    for event in kept:
        lg.process(event)
        assert len(lg.runs["run-1"].waiting) <= REORDER_LIMIT


def test_flush_processes_what_waits():
    events = looping_events(10)
    lg = loop_guard(**GAP_CONFIG)
    lg.process(events[0])
    for event in events[2:]:  # seq 2 lost; 18 events wait
        assert lg.process(event) == []
    state = lg.runs["run-1"]
    assert len(state.waiting) == 18
    flushed = state.flush(lg.config_for("agent-1"))
    assert state.waiting == {} and state.last_seq == 20
    assert state.stats.gaps == 1
    assert [d.seq for d in flushed] == [5, 7, 9, 11, 13, 15, 17, 19]
    assert state.flush(lg.config_for("agent-1")) == []
    # whatever order the waiting events came in, flush gives the same decisions and state
    lg2 = loop_guard(**GAP_CONFIG)
    for event in [events[0], *reversed(events[2:])]:
        assert lg2.process(event) == []
    assert lg2.runs["run-1"].flush(lg2.config_for("agent-1")) == flushed
    assert state_json(lg2) == state_json(lg)


def test_flush_counts_every_missing_seq():
    events = looping_events(10)
    lg = loop_guard(**GAP_CONFIG)
    for event in events:
        if event.envelope.seq not in (1, 2, 7):
            lg.process(event)
    state = lg.runs["run-1"]
    state.flush(lg.config_for("agent-1"))
    assert state.stats.gaps == 3
    assert state.stats.events == 17


# -- gaps bounded in event time, RunEnded flushes ----------------------------------------


def first_decision_arrival(lg, events):
    """(index in ``events`` whose processing published the first decision, all decisions)."""
    first, out = None, []
    for i, event in enumerate(events):
        decided = lg.process(event)
        if decided and first is None:
            first = i
        out.extend(decided)
    return first, out


def test_a_gap_is_given_up_after_its_wait_in_event_time():
    # 40 identical cycles, one a second, seq 2 lost: decisions come once the events behind
    # the gap span REORDER_MAX_WAIT_MS of event time, not after REORDER_LIMIT of them
    events = looping_events(40, time_step=1000)
    kept = [e for e in events if e.envelope.seq != 2]
    lg = loop_guard(**GAP_CONFIG)
    first, decisions = first_decision_arrival(lg, kept)
    state = lg.runs["run-1"]
    behind = REORDER_MAX_WAIT_MS // 1000  # seq 3 is the first event behind the gap
    assert kept[first].envelope.seq == 3 + behind  # seq 8, not seq 66
    assert state.waiting == {} and state.last_seq == 80 and state.stats.gaps == 1
    # the same decisions as if seq 2 had arrived, but for the call whose result was lost
    full = process(GAP_CONFIG, events)[0]
    assert [d.seq for d in decisions] == [d.seq for d in full]
    assert [d.decision_id for d in decisions] == [d.decision_id for d in full]


def test_events_closer_in_event_time_wait_for_the_count_bound():
    events = looping_events(40, time_step=10)
    kept = [e for e in events if e.envelope.seq != 2]
    first, _ = first_decision_arrival(loop_guard(**GAP_CONFIG), kept)
    assert kept[first].envelope.seq == 3 + REORDER_LIMIT


def test_the_wait_is_measured_from_the_first_event_after_the_gap():
    # a long tool run before the lost event does not count: only the waiting events' span
    run = Run(None, time_step=10)
    run.make_call("exec", {"command": "make"})
    run.seq += 1  # seq 2 lost
    run.start_time += 60_000  # ... a minute after seq 1
    for _ in range(10):
        run.make_call("read", {"path": "a"})
    lg = loop_guard(**GAP_CONFIG)
    assert [d for e in run.events for d in lg.process(e)] == []
    assert len(lg.runs["run-1"].waiting) == 10


def test_a_lost_event_in_a_long_run_stays_deterministic():
    events = looping_events(200, time_step=700)
    kept = [e for i, e in enumerate(events) if i % 37 != 5]  # a few lost events
    first, lg1 = process(GAP_CONFIG, kept)
    second, lg2 = process(GAP_CONFIG, kept)
    assert first == second and state_json(lg1) == state_json(lg2)
    assert lg1.runs["run-1"].waiting == {}
    # and persisted and restored at every step, as a restarted worker would be
    lg3 = loop_guard(**GAP_CONFIG)
    third: list[Decision] = []
    for event in kept:
        third.extend(lg3.process(event))
        state = lg3.runs["run-1"]
        lg3.runs["run-1"] = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert third == first and state_json(lg3) == state_json(lg1)


@pytest.mark.parametrize("time_step", [1000, 10])
def test_seq_2_lost_then_a_post_compaction_loop_still_aborts(time_step):
    run = Run(None, time_step=time_step)
    run.make_call("read", {"path": "a"})
    run.make_result("read", {"path": "a"}, text_result("first"))  # seq 2: lost
    run.make_compaction()
    for _ in range(3):
        run.make_call("read", {"path": "a"})
        run.make_result("read", {"path": "a"}, text_result("same"))
    run.make_end()
    lg = loop_guard()  # defaults: rolling detectors off, the guard on
    decided = [d for e in run.events if e.envelope.seq != 2 for d in lg.process(e)]
    d = one(decided)
    assert (d.action.value, d.error_code, d.seq) == ("abort", "compaction_loop_persisted", 9)
    state = lg.runs["run-1"]
    assert state.status == "aborted" and state.waiting == {} and state.last_seq == 10


def test_run_ended_flushes_what_waits_in_seq_order():
    events = looping_events(10, time_step=10)
    end = Run(None, time_step=10, start_seq=21).make_end()
    lg = loop_guard(**GAP_CONFIG)
    lg.process(events[0])
    for event in events[2:9]:  # seq 2 lost; seqs 3..9 wait
        assert lg.process(event) == []
    for event in events[10:]:  # seq 10 lost too; seqs 11..20 wait
        assert lg.process(event) == []
    flushed = lg.process(end)
    state = lg.runs["run-1"]
    assert state.waiting == {} and state.status == "ended"
    assert (state.last_seq, state.stats.gaps, state.event_count) == (21, 2, 19)
    assert [d.seq for d in flushed] == sorted(d.seq for d in flushed)
    assert {d.seq for d in flushed} <= {5, 7, 9, 11, 13, 15, 17, 19}
    # the lost events arrive at last: too late
    assert lg.process(events[1]) == [] and lg.process(events[9]) == []
    assert state.stats.duplicates == 2


def test_run_progress_fields():
    events = looping_events(3, time_step=1000)  # seqs 1..6
    state = RunState("run-1")
    cfg = resolve(GAP_CONFIG)
    assert (state.last_seq, state.status, state.event_count, state.last_seq_time) == (
        0,
        "active",
        0,
        0,
    )
    state.apply(events[0], cfg)
    state.apply(events[2], cfg)  # waits for seq 2
    assert (state.last_seq, state.event_count) == (1, 1)
    assert state.last_seq_time == events[0].envelope.event_time
    assert state.last_event_time == events[0].envelope.event_time  # seq 3 is not applied yet
    state.apply(events[1], cfg)
    assert (state.last_seq, state.event_count) == (3, 3)
    assert state.last_seq_time == events[2].envelope.event_time
    end = Run(None, start_seq=7).make_end()
    state.apply(end, cfg)
    assert (state.last_seq, state.status, state.event_count) == (7, "ended", 4)
    assert state.last_seq_time == end.envelope.event_time


def test_a_state_written_before_last_seq_time_still_loads():
    events = looping_events(3, time_step=1000)
    state = RunState("run-1")
    for event in events:
        state.apply(event, resolve(GAP_CONFIG))
    old = json.loads(json.dumps(state.to_dict()))
    del old["last_seq_time"]  # as written by the previous release
    loaded = RunState.from_dict(old)
    assert loaded.last_seq_time == state.last_event_time == events[-1].envelope.event_time
    assert loaded.to_dict() == state.to_dict()
    more = looping_events(5, time_step=1000)[6:]
    assert [loaded.apply(e, resolve(GAP_CONFIG)) for e in more] == [
        state.apply(e, resolve(GAP_CONFIG)) for e in more
    ]


def test_duplicates_are_dropped_and_counted():
    events = looping_events(5)
    lg = loop_guard(**GAP_CONFIG)
    once, _ = process(GAP_CONFIG, events)
    twice: list[Decision] = []
    for event in events:
        twice.extend(lg.process(event))
        twice.extend(lg.process(event))
    assert twice == once
    assert lg.runs["run-1"].stats.duplicates == len(events)
    # a duplicate of an event that is still waiting is dropped too
    lg2 = loop_guard(**GAP_CONFIG)
    lg2.process(events[2])
    lg2.process(events[2])
    assert lg2.runs["run-1"].stats.duplicates == 1
    assert len(lg2.runs["run-1"].waiting) == 1


def test_history_resized_when_config_changes():
    events = looping_events(10)
    state = RunState("run-1")
    for event in events[:10]:
        state.apply(event, resolve(GAP_CONFIG))
    assert len(state.history) == 5
    state.apply(events[10], resolve(dict(GAP_CONFIG, historySize=2)))
    assert len(state.history) == 2
    assert state.to_dict()["history_size"] == 2


def test_round_trip_keeps_waiting_events_guard_and_blocks():
    lg = loop_guard(enabled=True, warningThreshold=2, criticalThreshold=3, abortAfterBlocks=9)
    run = Run(None)
    for _ in range(5):
        run.make_call("read", {"path": "a"})
        run.make_result("read", {"path": "a"}, text_result("same"))
    run.make_compaction()
    run.make_call("read", {"path": "a"}, call_id="x")
    run.make_result("read", result=text_result("same"), call_id="x", omit_args=True)
    for event in run.events[:-3]:
        lg.process(event)
    lg.process(run.events[-1])  # waits for the two before it
    state = lg.runs["run-1"]
    data = json.loads(json.dumps(state.to_dict()))
    assert data["blocks"] == 2 and len(data["waiting"]) == 1
    copy = RunState.from_dict(data)
    assert copy.to_dict() == data
    cfg = lg.config_for("agent-1")
    assert [d.action.value for d in copy.apply(run.events[-3], cfg)] == []  # compaction
    assert [(d.action.value, d.detector) for d in copy.apply(run.events[-2], cfg)] == [
        ("block", "generic_repeat"),
    ]
    assert copy.guard.remaining == 2
    assert copy.blocks == 3


def test_a_result_echoing_its_call_in_other_words_still_finds_the_call():
    """A result whose args text differs from its call's (key order, spacing) skips the
    same-text shortcut and still attaches to the pending call: one record, with the result."""
    run = Run(None, run_id="r1", agent_id="agent")
    run.make_call("grep", {"a": 1, "b": 2}, "c1")
    run.make_result("grep", {"a": 1, "b": 2}, text_result("same"), None, "c1")
    reworded = [*run.events[:-1], replace(run.events[-1], args_json='{"b": 2,  "a": 1}')]
    assert reworded[-1].args_json != run.events[0].args_json
    _, same_text = process(CONFIGS[0], run.events)
    _, other_text = process(CONFIGS[0], reworded)
    history = other_text.runs["r1"].history
    assert len(history) == 1 and history.records[0].result_hash is not None
    assert state_json(other_text) == state_json(same_text)


def test_a_second_result_omitting_its_args_still_uses_its_calls_args():
    # the call (id c1) was answered by a result without an id; its own result comes later,
    # args omitted: it is hashed with the call's args, not with none (a new record of them)
    run = Run(None)
    run.make_call("read", {"path": "a"}, "c1")
    run.make_result("read", {"path": "a"}, text_result("same"))
    run.make_result("read", result=text_result("same"), call_id="c1", omit_args=True)
    _, lg = process(CONFIGS[0], run.events)
    records = lg.runs["run-1"].history.records
    assert [r.sig for r in records] == [args_hash("read", {"path": "a"})] * 2
    assert records[0].result_hash == records[1].result_hash is not None


def test_a_decisions_dict_owns_its_extra_flat_or_nested() -> None:
    """``to_dict`` copies ``extra`` (a plain copy when flat): changing the dict's never
    changes the decision's, which the run's state keeps."""
    from streams.core.events import Action, Decision

    def decision(extra: dict) -> Decision:
        return Decision(
            run_id="r", agent_id="a", gateway_id="g", seq=3, event_time=0,
            action=Action.BLOCK, detector="exact_repeat", severity="critical", count=3,
            tool_name="read", reason="x", extra=extra,
        )  # fmt: skip

    flat = decision({"blocks": "3"})
    data = flat.to_dict()
    data["extra"]["blocks"] = "4"
    assert flat.extra == {"blocks": "3"} and Decision.from_dict(flat.to_dict()) == flat
    nested = decision({"cycle": {"agents": ["a", "b"]}})
    data = nested.to_dict()
    data["extra"]["cycle"]["agents"].append("c")
    assert nested.extra == {"cycle": {"agents": ["a", "b"]}}
