"""Whom a full runs table lets go, so that no identity can steer it (issue 40, item 3).

Every run belongs to the gateway that started it (its ``gateway_id``; with gateway keys, an
identity no other gateway can claim, streams.wire.signing). A gateway holds at most
``quota`` runs: past it, its own runs go, and only its own. Past the table's ``cap``, ended
runs go first (they decide nothing more), then the runs of whichever gateway holds the most:
one run at a time from the largest holder, so a gateway that floods the table with fresh run
ids pays for the flood itself (even if its flood runs loop and are warned), and a gateway
holding few runs loses one only once every other holds as few. Within a gateway, idle runs
go before its runs with a warning, block or abort in force, which go only when it has
nothing else left; then the least recently active first, ties by run id: the same table and
clock always give the same choice.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping

from streams.core.run_state import ABORTED, ENDED, RunState

#: Who a cap on the runs held evicts first: an ended run decides nothing more; an idle run
#: only loses its history; a run with a warning, block or abort in force would be let go.
EVICTION_ORDER = ("ended", "idle", "enforced")
QUOTA = "quota"  # the reason a run over its gateway's quota goes


def eviction_class(state: RunState, kept: bool = False) -> str:
    """Which :data:`EVICTION_ORDER` class a run is in. ``kept``: the latest run of a session
    in session scope (the session's next run seeds from it), never counted as ended."""
    if state.status == ABORTED or state.blocks > 0 or state.recent:
        return "enforced"
    if state.status == ENDED and not kept:
        return "ended"
    return "idle"


def choose_evictions(
    classes: Mapping[Hashable, str],
    owners: Mapping[Hashable, str],
    touched: Mapping[Hashable, float],
    cap: int,
    quota: int = 0,
) -> list[tuple[Hashable, str]]:
    """Whom to evict, with why (their class, or :data:`QUOTA`), so that no gateway holds more
    than ``quota`` of the runs in ``classes`` (run id → :func:`eviction_class`) and at most
    ``cap`` remain; 0 turns either off. ``owners``: run id → its gateway (a run missing
    there counts as gateway ""); ``touched``: when each run was last active (a run missing
    there counts as the least recent)."""

    def recency(run_id: Hashable) -> tuple[float, str]:
        return (touched.get(run_id, float("-inf")), repr(run_id))

    rank = {name: i for i, name in enumerate(EVICTION_ORDER)}
    held: dict[str, list[Hashable]] = defaultdict(list)  # each gateway's runs, first to go first
    for run_id in classes:
        held[owners.get(run_id, "")].append(run_id)

    def order(run_id: Hashable) -> tuple[int, float, str]:
        return (rank[classes[run_id]], *recency(run_id))

    for runs in held.values():
        runs.sort(key=order)
    chosen: list[tuple[Hashable, str]] = []
    if quota > 0:
        for owner in sorted(held):
            over = len(held[owner]) - quota
            if over > 0:
                chosen.extend((run_id, QUOTA) for run_id in held[owner][:over])
                del held[owner][:over]
    excess = sum(len(runs) for runs in held.values()) - cap
    if cap <= 0 or excess <= 0:
        return chosen
    count = {owner: len(runs) for owner, runs in held.items()}
    ended = [run_id for runs in held.values() for run_id in runs if classes[run_id] == "ended"]
    for run_id in heapq.nsmallest(excess, ended, key=recency):
        chosen.append((run_id, "ended"))
        count[owners.get(run_id, "")] -= 1
        excess -= 1
    if excess > 0:
        queues = {
            owner: [run_id for run_id in runs if classes[run_id] != "ended"]
            for owner, runs in held.items()
        }
        taken = from_largest_holders(queues, count, excess, order)
        chosen.extend((run_id, classes[run_id]) for run_id in taken)
    return chosen


def from_largest_holders(
    queues: dict[str, list[Hashable]],
    count: dict[str, int],
    n: int,
    order: Callable[[Hashable], tuple[int, float, str]],
) -> list[Hashable]:
    """Up to ``n`` runs, one at a time from the gateway then holding the most (``count``),
    each the first left in its queue; between gateways holding as many, the one whose next
    run comes first in ``order`` (class, then least recently active). ``count`` follows."""
    heap = [(-count[owner], order(queue[0]), owner) for owner, queue in queues.items() if queue]
    heapq.heapify(heap)
    next_in = dict.fromkeys(queues, 0)
    taken: list[Hashable] = []
    while heap and len(taken) < n:
        _, _, owner = heapq.heappop(heap)
        queue = queues[owner]
        taken.append(queue[next_in[owner]])
        next_in[owner] += 1
        count[owner] -= 1
        if next_in[owner] < len(queue):
            heapq.heappush(heap, (-count[owner], order(queue[next_in[owner]]), owner))
    return taken
