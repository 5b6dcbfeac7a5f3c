"""The run expiry policy: an active run goes only when idle on both clocks."""

from __future__ import annotations

from streams.state.expiry import RunExpiry

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
