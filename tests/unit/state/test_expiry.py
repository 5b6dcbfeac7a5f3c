"""The run expiry policy: an active run goes only when idle on both clocks."""

from __future__ import annotations

from core_helpers import Run, text_result

from streams.core.config import resolve
from streams.core.run_state import RunState
from streams.state.eviction import eviction_class
from streams.state.expiry import CAP_WARNING_SECONDS, RunExpiry

T0 = 1_800_000_000.0  # wall-clock seconds
TTL = 60.0


def ms(seconds: float) -> int:
    return int(seconds * 1000)


def test_active_run_idle_on_both_clocks_expires() -> None:
    expiry = RunExpiry(TTL)
    expiry.touch(b"r", T0)
    expiry.observe(ms(T0), T0)
    later = T0 + TTL + 1
    expiry.observe(ms(later), later)  # other runs' events move the watermark on
    assert expiry.reason(b"r", True, ms(T0), later) == "idle"


def test_backlogged_worker_keeps_runs_whose_events_are_still_queued() -> None:
    """Wall clock says idle, but in event time the run is current: its next events are
    queued behind others. Dropping it would make its later events wait for seq 1."""
    expiry = RunExpiry(TTL)
    expiry.touch(b"r", T0)
    expiry.observe(ms(T0 - 3600), T0)  # the worker reads events an hour old
    assert expiry.reason(b"r", True, ms(T0 - 3600), T0 + 10 * TTL) is None


def test_gateway_with_a_late_clock_keeps_its_live_runs() -> None:
    expiry = RunExpiry(TTL)
    expiry.observe(ms(T0), T0)
    expiry.touch(b"r", T0)  # just processed an event stamped two hours ago
    assert expiry.reason(b"r", True, ms(T0 - 7200), T0 + 1) is None


def test_fast_gateway_clock_cannot_push_the_watermark_past_now() -> None:
    expiry = RunExpiry(TTL)
    expiry.observe(ms(T0 + 7200), T0)
    assert expiry.watermark_ms == ms(T0)


def test_ended_run_goes_after_the_grace_period_only() -> None:
    expiry = RunExpiry(3600.0, ended_grace=300.0)
    expiry.touch(b"r", T0)
    assert expiry.reason(b"r", False, ms(T0), T0 + 299) is None
    assert expiry.reason(b"r", False, ms(T0), T0 + 301) == "ended"


def test_grace_never_exceeds_the_idle_ttl() -> None:
    expiry = RunExpiry(10.0, ended_grace=300.0)
    expiry.touch(b"r", T0)
    assert expiry.reason(b"r", False, ms(T0), T0 + 11) == "ended"


def test_recovered_run_starts_its_clock_when_first_seen() -> None:
    expiry = RunExpiry(TTL)
    expiry.observe(ms(T0), T0)
    assert expiry.reason(b"recovered", False, 0, T0) is None
    assert expiry.reason(b"recovered", False, 0, T0 + TTL + 1) == "ended"


def test_retain_forgets_runs_that_left_the_table() -> None:
    expiry = RunExpiry(TTL)
    for key in (b"a", b"b", b"c"):
        expiry.touch(key, T0)
    expiry.retain({b"b"})
    assert set(expiry.last_touched) == {b"b"}


# -- expiry by arrival time (issue 26, item 7) ----------------------------------------------


def test_a_run_dated_in_the_future_still_expires() -> None:
    """Its event time counts as its arrival time: it ages with the wall clock."""
    expiry = RunExpiry(TTL)
    expiry.observe(ms(T0 + 86_400), T0)  # a gateway clock a day fast
    expiry.touch(b"future", T0)
    later = T0 + TTL + 1
    expiry.observe(ms(later), later)  # other runs' events move the watermark on
    assert expiry.reason(b"future", True, ms(T0 + 86_400), later) == "idle"


def test_a_future_dated_run_recovered_after_a_restart_expires() -> None:
    """From the changelog: never touched by this worker, its clock starts when first seen."""
    expiry = RunExpiry(TTL)
    expiry.observe(ms(T0), T0)
    assert expiry.reason(b"future", True, ms(T0 + 10**9), T0) is None
    later = T0 + TTL + 1
    expiry.observe(ms(later), later)
    assert expiry.reason(b"future", True, ms(T0 + 10**9), later) == "idle"


def test_a_future_dated_run_that_keeps_sending_is_kept() -> None:
    expiry = RunExpiry(TTL)
    expiry.touch(b"future", T0)
    later = T0 + TTL + 1
    expiry.observe(ms(later), later)
    expiry.touch(b"future", later - 1)  # still sending
    assert expiry.reason(b"future", True, ms(T0 + 86_400), later) is None


def test_least_recent_names_the_runs_seen_longest_ago() -> None:
    expiry = RunExpiry(TTL)
    for i, key in enumerate((b"c", b"a", b"d", b"b")):
        expiry.touch(key, T0 + i)
    expiry.touch(b"c", T0 + 10)  # seen again: now the most recent
    assert expiry.least_recent(2) == [b"a", b"d"]
    assert expiry.least_recent(0) == [] and len(expiry.least_recent(10)) == 4


# ------------------------------------------------------------------ the cap on runs held


def run_state(run_id: str, cycles: int = 0, end: bool = False) -> RunState:
    """A real run: ``cycles`` identical read calls with the same result (10 warn, more block
    and abort under the default thresholds), ended if ``end``."""
    run = Run(None, run_id=run_id)
    for _ in range(cycles):
        run.make_call("read", {"path": "a"})
        run.make_result("read", {"path": "a"}, text_result("same"))
    if end:
        run.make_end()
    state, cfg = RunState(run_id), resolve({"enabled": True})
    for event in run.events:
        state.apply(event, cfg)
    return state


def test_each_run_falls_in_one_eviction_class() -> None:
    assert eviction_class(run_state("fresh", 2)) == "idle"
    assert eviction_class(run_state("done", 2, end=True)) == "ended"
    looping = run_state("looping", 40)
    assert looping.blocks > 0 or looping.recent  # a warning/block in force
    assert eviction_class(looping) == "enforced"
    assert eviction_class(run_state("looped-then-ended", 40, end=True)) == "enforced"
    # The latest run of a session in session scope seeds the next one: idle, not ended.
    assert eviction_class(run_state("session-latest", 2, end=True), kept=True) == "idle"


def test_eviction_takes_ended_then_idle_then_enforced_least_recent_first() -> None:
    expiry = RunExpiry(TTL)
    classes = {
        b"enforced-old": "enforced",
        b"idle-new": "idle",
        b"ended-new": "ended",
        b"idle-old": "idle",
        b"ended-old": "ended",
    }
    for i, key in enumerate(
        (b"enforced-old", b"idle-old", b"ended-old", b"idle-new", b"ended-new")
    ):
        expiry.touch(key, T0 + i)
    assert expiry.evictions(classes, 5) == []
    assert expiry.evictions(classes, 4) == [(b"ended-old", "ended")]
    assert expiry.evictions(classes, 2) == [
        (b"ended-old", "ended"),
        (b"ended-new", "ended"),
        (b"idle-old", "idle"),
    ]
    # A run with a warning/block in force goes only when nothing else is left.
    assert [key for key, _ in expiry.evictions(classes, 1)] == [
        b"ended-old",
        b"ended-new",
        b"idle-old",
        b"idle-new",
    ]
    assert expiry.evictions(classes, 0) == []  # 0: no cap


def test_eviction_is_the_same_whatever_the_table_order() -> None:
    """Ties (same class, same last activity) go by run id: the same table and clock always
    choose the same runs, however the table iterates."""
    keys = [f"run-{i:03d}".encode() for i in range(50)]
    chosen = []
    for order in (keys, list(reversed(keys)), keys[25:] + keys[:25]):
        expiry = RunExpiry(TTL)
        for key in order:
            expiry.touch(key, T0)  # all at once: only the run id tells them apart
        chosen.append(expiry.evictions({key: "idle" for key in order}, 40))
    assert chosen[0] == chosen[1] == chosen[2] == [(key, "idle") for key in keys[:10]]


def test_a_run_never_touched_counts_as_least_recent() -> None:
    expiry = RunExpiry(TTL)
    expiry.touch(b"seen", T0)
    assert expiry.evictions({b"seen": "idle", b"recovered": "idle"}, 1) == [(b"recovered", "idle")]


def test_the_cap_warning_comes_at_most_once_a_minute() -> None:
    expiry = RunExpiry(TTL)
    assert expiry.cap_warning_due(T0)
    assert not expiry.cap_warning_due(T0 + 10)
    assert not expiry.cap_warning_due(T0 + CAP_WARNING_SECONDS - 1)
    assert expiry.cap_warning_due(T0 + CAP_WARNING_SECONDS)
