"""Eviction cannot be steered by a flood (issue 40, item 3): a gateway's fresh run ids, idle or
looping, are evicted before another gateway's run, and a gateway over its quota loses only its
own runs."""

from __future__ import annotations

from collections import Counter

from streams.state.eviction import QUOTA, choose_evictions
from streams.state.expiry import RunExpiry

T0 = 1_700_000_000.0


def test_a_flood_of_fresh_run_ids_evicts_only_the_flooders_runs() -> None:
    """The reported attack: a looping run not yet warned (idle, the least recently active),
    then 3,500 fresh run ids from another gateway against a cap of 3,000."""
    expiry = RunExpiry(3600.0)
    classes = {b"victim-loop": "idle", b"victim-done": "ended"}
    owners = {b"victim-loop": "gw-victim", b"victim-done": "gw-victim"}
    expiry.touch(b"victim-done", T0 - 10)
    expiry.touch(b"victim-loop", T0)
    for i in range(3500):
        run_id = f"flood-{i:05d}".encode()
        classes[run_id], owners[run_id] = "idle", "gw-flood"
        expiry.touch(run_id, T0 + 1 + i)
    evicted = expiry.evictions(classes, 3000, owners)
    assert len(evicted) == len(classes) - 3000
    assert (b"victim-done", "ended") in evicted  # an ended run decides nothing more
    assert b"victim-loop" not in dict(evicted)
    assert Counter(owners[run_id] for run_id, _ in evicted) == {"gw-flood": 501, "gw-victim": 1}
    # The flood's oldest go first.
    assert [run_id for run_id, _ in evicted[1:3]] == [b"flood-00000", b"flood-00001"]


def test_flood_runs_that_loop_do_not_shield_themselves() -> None:
    """Flood runs warned (looping on purpose) still go before a smaller gateway's idle run."""
    classes = {f"flood-{i}": "enforced" for i in range(30)} | {"victim": "idle"}
    owners = {run_id: "gw-flood" for run_id in classes} | {"victim": "gw-victim"}
    touched = {run_id: T0 + i for i, run_id in enumerate(classes)}
    touched["victim"] = T0 - 100
    evicted = choose_evictions(classes, owners, touched, cap=20)
    assert len(evicted) == 11 and all(owners[run_id] == "gw-flood" for run_id, _ in evicted)
    assert {why for _, why in evicted} == {"enforced"}


def test_eviction_takes_from_the_largest_holder_until_holdings_level() -> None:
    holdings = {"gw-a": 10, "gw-b": 6, "gw-c": 2}
    classes, owners, touched = {}, {}, {}
    for gateway, n in holdings.items():
        for i in range(n):
            run_id = f"{gateway}-{i}"
            classes[run_id], owners[run_id], touched[run_id] = "idle", gateway, T0 + i
    evicted = choose_evictions(classes, owners, touched, cap=12)
    left = Counter(owners.values()) - Counter(owners[run_id] for run_id, _ in evicted)
    assert left == {"gw-a": 5, "gw-b": 5, "gw-c": 2}
    # Each gateway's least recently active first.
    assert [run_id for run_id, _ in evicted if owners[run_id] == "gw-b"] == ["gw-b-0"]


def test_within_a_gateway_its_warned_runs_go_last() -> None:
    classes = {"loop": "enforced", "idle-1": "idle", "idle-2": "idle", "done": "ended"}
    owners = dict.fromkeys(classes, "gw")
    touched = {"loop": T0, "idle-1": T0 + 1, "idle-2": T0 + 2, "done": T0 + 3}
    assert choose_evictions(classes, owners, touched, cap=1) == [
        ("done", "ended"),
        ("idle-1", "idle"),
        ("idle-2", "idle"),
    ]
    assert choose_evictions(classes, owners, touched, cap=0) == []  # 0: no cap


def test_a_gateway_over_its_quota_loses_its_own_runs_below_the_cap() -> None:
    classes = {f"a-{i}": "idle" for i in range(8)} | {"a-loop": "enforced", "b-0": "idle"}
    owners = {run_id: run_id.split("-")[0] for run_id in classes}
    touched = {run_id: T0 + i for i, run_id in enumerate(sorted(classes))}
    touched["a-loop"] = T0 - 50  # the oldest, but warned: its gateway's idle runs go first
    evicted = choose_evictions(classes, owners, touched, cap=100, quota=5)
    assert evicted == [(f"a-{i}", QUOTA) for i in range(4)]
    assert choose_evictions(classes, owners, touched, cap=100, quota=0) == []


def test_without_gateway_ids_eviction_is_least_recent_first_as_before() -> None:
    expiry = RunExpiry(3600.0)
    classes = {b"old": "idle", b"new": "idle", b"warned": "enforced"}
    for i, run_id in enumerate((b"warned", b"old", b"new")):
        expiry.touch(run_id, T0 + i)
    assert expiry.evictions(classes, 1) == [(b"old", "idle"), (b"new", "idle")]
