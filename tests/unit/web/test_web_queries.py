"""streams.audit.queries, the status page's reads, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from db_fixtures import record_progress

from streams.audit import queries
from streams.audit.queries import Filters
from streams.audit.store import AuditStore
from streams.core.events import Action, Decision

T0 = 1_700_000_000_000  # a fixed epoch ms, so buckets are predictable
MIN = 60_000


def dec(run: str, seq: int, action: Action, t: int, **over) -> Decision:
    values = {
        "run_id": run,
        "agent_id": "coder",
        "gateway_id": "gw",
        "seq": seq,
        "event_time": t,
        "action": action,
        "detector": "generic_repeat",
        "severity": "warning",
        "count": seq,
        "tool_name": "exec",
        "reason": f"r{seq}",
    }
    values.update(over)
    return Decision(**values)


@pytest.fixture
def store(audit_store: AuditStore) -> AuditStore:
    audit_store.record_decisions(
        [
            dec("a", 1, Action.WARN, T0),
            dec("a", 2, Action.BLOCK, T0 + MIN, detector="ping_pong", tool_name="read"),
            dec("a", 3, Action.WARN, T0 + 2 * MIN),  # later, but less severe than the block
            dec("a", 4, Action.BLOCK, T0 + 3 * MIN, tool_name="grep"),  # as severe, an echo
            dec("b", 1, Action.WARN, T0 + 30 * MIN, agent_id="other"),
            dec("c", 1, Action.ABORT, T0 + 59 * MIN + 59_999, detector="no_progress"),
        ]
    )
    return audit_store


def test_grouped_runs_headline_is_the_first_worst_decision(store: AuditStore) -> None:
    lines = {line.run_id: line for line in queries.grouped_runs(store, Filters())}
    assert list(lines) == ["c", "b", "a"]  # most recently seen first
    a = lines["a"]
    headline = (a.worst_action, a.tool_name, a.count, a.detector)
    assert headline == ("block", "read", 2, "ping_pong")  # the first block, not its echo
    assert (a.decisions, a.warn, a.block, a.abort, a.detectors) == (4, 2, 2, 0, 2)
    assert (a.first_seen, a.last_seen) == (T0, T0 + 3 * MIN)
    assert a.status is None and a.events is None
    assert [line.run_id for line in queries.grouped_runs(store, Filters(), limit=1)] == ["c"]


@pytest.mark.parametrize(
    ("filters", "runs"),
    [
        (Filters(agent="other"), ["b"]),
        (Filters(detector="ping_pong"), ["a"]),
        (Filters(tool="grep"), ["a"]),
        (Filters(min_action="block"), ["c", "a"]),
        (Filters(min_action="abort"), ["c"]),
        (Filters(since_ms=T0 + 2 * MIN, until_ms=T0 + 31 * MIN), ["b", "a"]),
    ],
)
def test_filters(store: AuditStore, filters: Filters, runs: list[str]) -> None:
    assert [line.run_id for line in queries.grouped_runs(store, filters)] == runs
    assert queries.count_runs(store, filters) == len(runs)


def test_filters_describe_only_matching_decisions(store: AuditStore) -> None:
    (a,) = queries.grouped_runs(store, Filters(detector="generic_repeat", agent="coder"))
    assert (a.decisions, a.warn, a.block, a.detectors) == (3, 2, 1, 1)
    assert (a.worst_action, a.tool_name) == ("block", "grep")
    (a,) = queries.grouped_runs(
        store,
        Filters(
            agent="coder", until_ms=T0 + 2 * MIN + 1, min_action="warn", detector="generic_repeat"
        ),
    )
    assert (a.worst_action, a.count, a.last_seen) == ("warn", 1, T0 + 2 * MIN)


def test_unknown_action_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown action"):
        Filters(min_action="explode").conditions()


def test_bucket_width_is_round_and_bounded() -> None:
    assert queries.bucket_width(60_000) == 1000
    assert queries.bucket_width(3_600_000) == 60_000
    assert queries.bucket_width(86_400_000) == 1_800_000
    assert queries.bucket_width(7 * 86_400_000) == 3 * 3_600_000
    huge = 10 * 365 * 86_400_000
    assert queries.bucket_width(huge) * queries.TARGET_BUCKETS >= huge
    for span in (1, 999, 61_000, 5 * 3_600_000, huge):
        assert -(-span // queries.bucket_width(span)) <= queries.TARGET_BUCKETS


def test_decision_buckets(store: AuditStore) -> None:
    chart = queries.decision_buckets(store, Filters(since_ms=T0, until_ms=T0 + 60 * MIN), 0)
    assert chart.width_ms == MIN and chart.start_ms == T0 - T0 % MIN
    assert chart.total == 6
    by_index = {i: b for i, b in enumerate(chart.buckets) if sum(b.values())}

    def index(t: int) -> int:
        return (t - chart.start_ms) // MIN

    assert by_index[index(T0)] == {"warn": 1, "block": 0, "abort": 0}
    assert by_index[index(T0 + MIN)] == {"warn": 0, "block": 1, "abort": 0}
    assert by_index[index(T0 + 59 * MIN + 59_999)] == {"warn": 0, "block": 0, "abort": 1}
    assert len(by_index) == 6
    assert chart.end_ms >= T0 + 60 * MIN

    # without a start the chart begins at the first matching decision and reaches the last
    chart = queries.decision_buckets(store, Filters(agent="coder"), now_ms=T0 + 10 * MIN)
    assert chart.start_ms <= T0 < T0 + 59 * MIN + 59_999 < chart.end_ms
    assert chart.total == 5  # all of "coder"'s

    # nothing matches: an empty last hour
    empty = queries.decision_buckets(store, Filters(agent="nobody"), now_ms=T0)
    assert empty.total == 0 and empty.buckets


def test_top_values_facets_overview_timeline(store: AuditStore) -> None:
    assert queries.top_values(store, Filters(), "agent_id") == [("coder", 5), ("other", 1)]
    assert queries.top_values(store, Filters(), "tool_name", limit=1) == [("exec", 4)]
    with pytest.raises(ValueError):
        queries.top_values(store, Filters(), "reason")
    assert queries.facets(store) == {
        "agents": ["coder", "other"],
        "detectors": ["generic_repeat", "no_progress", "ping_pong"],
    }
    overview = queries.trail_overview(store)
    assert (overview.decisions, overview.dead_letters, overview.runs_tracked) == (6, 0, 0)
    assert overview.last_decision_time == T0 + 59 * MIN + 59_999

    record_progress(store, "a", "coder", 9, T0 + 4 * MIN, "ended", events=9)
    timeline = queries.run_timeline(store, "a")
    assert [d.seq for d in timeline.decisions] == [1, 2, 3, 4]
    assert timeline.progress is not None and timeline.progress.last_seq == 9
    assert queries.grouped_runs(store, Filters(agent="coder"))[-1].status == "ended"
    nothing = queries.run_timeline(store, "zzz")
    assert nothing.decisions == [] and nothing.progress is None


def test_severity() -> None:
    assert [queries.severity(a) for a in ("bogus", "warn", "block", "abort")] == [0, 1, 2, 3]
