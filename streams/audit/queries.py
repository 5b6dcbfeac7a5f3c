"""Read-only queries over the audit trail for the worker's status page (:mod:`streams.web`).

They use the tables of :mod:`streams.audit.store` and work on SQLite and PostgreSQL alike:

* :func:`grouped_runs` – one line per run (its worst decision, counts, last seen);
* :func:`decision_buckets` – decisions over time by action, for the chart;
* :func:`top_values` – the agents or tools with the most matching decisions;
* :func:`facets` – the agents and detectors known to the trail, for the filter controls;
* :func:`run_timeline` – one run's decisions in order, with its progress record;
* :func:`trail_overview` – what the database holds.

Every filter applies to decisions (as in :meth:`AuditStore.runs`), so a run's line describes
only its matching decisions. The audit trail records decisions, dead letters and per-run
progress; calls, results and compactions are not stored in SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import ColumnElement, and_, case, distinct, false, func, select

from streams.audit.models import DeadLetter, DecisionRow, ProcessedEvent, RunUsageRow
from streams.audit.observed import enforced_abort_exists, reported_status
from streams.audit.store import AuditStore, RunProgress
from streams.core.events import Action, Decision

ACTION_ORDER: tuple[str, ...] = tuple(a.value for a in (Action.WARN, Action.BLOCK, Action.ABORT))
#: Chart bucket widths to choose from (ms): about 60 bars whatever the time range.
NICE_WIDTHS_MS = tuple(
    s * 1000
    for s in (1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
) + tuple(d * 86_400_000 for d in (1, 2, 7, 14, 30))
TARGET_BUCKETS = 60


@dataclass(frozen=True, slots=True)
class Filters:
    """What the status page's form selects; ``None`` means "any"."""

    agent: str | None = None
    detector: str | None = None
    tool: str | None = None
    min_action: str | None = None  # warn, block or abort: decisions at least this severe
    since_ms: int | None = None  # inclusive
    until_ms: int | None = None  # exclusive
    exclude_agents: tuple[str, ...] = ()  # e.g. the test loops' agent (streams.audit.canary)

    def conditions(self) -> list[ColumnElement[bool]]:
        d = DecisionRow
        conds: list[ColumnElement[bool]] = []
        if self.agent is not None:
            conds.append(d.agent_id == self.agent)
        if self.exclude_agents:
            conds.append(d.agent_id.not_in(self.exclude_agents))
        if self.detector is not None:
            conds.append(d.detector == self.detector)
        if self.tool is not None:
            conds.append(d.tool_name == self.tool)
        if self.min_action is not None:
            if self.min_action not in ACTION_ORDER:
                raise ValueError(f"unknown action {self.min_action!r}")
            conds.append(d.action.in_(ACTION_ORDER[ACTION_ORDER.index(self.min_action) :]))
        if self.since_ms is not None:
            conds.append(d.event_time >= self.since_ms)
        if self.until_ms is not None:
            conds.append(d.event_time < self.until_ms)
        return conds


@dataclass(frozen=True, slots=True)
class RunLine:
    """One run on the status page: its headline decision and totals.

    The headline is the first decision (in the run's order) with the run's worst action: the
    one that made the run that bad, not the echoes after it (e.g. calls refused after an
    abort); an enforced one before an observe-only one, so the headline is observe-only
    (``worst_observed``) only when nothing at that action was enforced.
    """

    run_id: str
    agent_id: str
    gateway_id: str
    worst_action: str
    detector: str  # of the headline decision
    tool_name: str
    count: int  # the headline decision's repeat count
    reason: str
    decisions: int
    warn: int
    block: int
    abort: int
    detectors: int  # distinct detectors among the matching decisions
    first_seen: int  # event time (ms) of the first matching decision
    last_seen: int  # ... and of the last one
    status: str | None = None  # from the run's progress record; "aborted (observe only)"
    events: int | None = None
    observed: int = 0  # observe-only decisions (mode "observe") among ``decisions``
    worst_observed: bool = False  # no decision at ``worst_action`` was enforced


@dataclass(frozen=True, slots=True)
class Chart:
    """Decisions per time bucket and action; ``buckets[i]`` covers ``start + i*width``."""

    start_ms: int
    width_ms: int
    buckets: list[dict[str, int]]

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.width_ms * len(self.buckets)

    @property
    def total(self) -> int:
        return sum(sum(b.values()) for b in self.buckets)


@dataclass(frozen=True, slots=True)
class Timeline:
    run_id: str
    progress: RunProgress | None
    decisions: list[Decision] = field(default_factory=list)
    usage: dict[str, Any] | None = None  # run_usage's columns (issue 28), when it reported some


@dataclass(frozen=True, slots=True)
class Overview:
    decisions: int
    dead_letters: int
    runs_tracked: int
    last_decision_time: int | None
    loop_tokens: int = 0  # tokens runs spent while looping (issue 28)
    saved_tokens: int = 0  # the estimate of what blocks and aborts saved
    usage_runs: int = 0  # runs whose gateways report usage


def _rank() -> Any:
    return case({a: i + 1 for i, a in enumerate(ACTION_ORDER)}, value=DecisionRow.action, else_=0)


def _n_action(column: Any, action: str) -> Any:
    return func.sum(case((column == action, 1), else_=0))


def grouped_runs(store: AuditStore, filters: Filters, limit: int = 100) -> list[RunLine]:
    """Runs with matching decisions, most recently seen first, one line each."""
    d = DecisionRow
    conds = filters.conditions()
    matching = (
        select(
            d.id,
            d.run_id,
            d.agent_id,
            d.gateway_id,
            d.action,
            d.detector,
            d.tool_name,
            d.count,
            d.reason,
            d.event_time,
            d.seq,
            d.enforced,
            _rank().label("rank"),
        )
        .where(*conds)
        .subquery("matching")
    )
    m = matching.c
    totals = (
        select(
            m.run_id,
            func.count().label("decisions"),
            _n_action(m.action, "warn").label("warn"),
            _n_action(m.action, "block").label("block"),
            _n_action(m.action, "abort").label("abort"),
            func.sum(case((m.enforced.is_(false()), 1), else_=0)).label("observed"),
            func.count(distinct(m.detector)).label("detectors"),
            func.min(m.event_time).label("first_seen"),
            func.max(m.event_time).label("last_seen"),
        )
        .group_by(m.run_id)
        .order_by(func.max(m.event_time).desc(), m.run_id)
        .limit(limit)
        .subquery("totals")
    )
    ranked = select(
        matching,
        func.row_number()
        .over(partition_by=m.run_id, order_by=(m.rank.desc(), m.enforced.desc(), m.seq, m.id))
        .label("rn"),
    ).subquery("ranked")
    t, r, p = totals.c, ranked.c, ProcessedEvent
    stmt = (
        select(
            t,
            r.agent_id,
            r.gateway_id,
            r.action,
            r.detector,
            r.tool_name,
            r.count,
            r.reason,
            r.enforced,
            p.status,
            p.events,
            enforced_abort_exists(DecisionRow, t.run_id).label("enforced_abort"),
        )
        .join(ranked, and_(r.run_id == t.run_id, r.rn == 1))
        .outerjoin(p, p.run_id == t.run_id)
        .order_by(t.last_seen.desc(), t.run_id)
    )
    with store.engine.connect() as conn:
        return [
            RunLine(
                run_id=row.run_id,
                agent_id=row.agent_id,
                gateway_id=row.gateway_id,
                worst_action=row.action,
                detector=row.detector,
                tool_name=row.tool_name,
                count=int(row.count),
                reason=row.reason,
                decisions=int(row.decisions),
                warn=int(row.warn),
                block=int(row.block),
                abort=int(row.abort),
                detectors=int(row.detectors),
                first_seen=int(row.first_seen),
                last_seen=int(row.last_seen),
                status=reported_status(row.status, bool(row.enforced_abort)),
                events=None if row.events is None else int(row.events),
                observed=int(row.observed),
                worst_observed=not row.enforced,
            )
            for row in conn.execute(stmt)
        ]


def count_runs(store: AuditStore, filters: Filters) -> int:
    """How many runs have matching decisions (the page shows at most ``limit`` of them)."""
    stmt = select(func.count(distinct(DecisionRow.run_id))).where(*filters.conditions())
    with store.engine.connect() as conn:
        return int(conn.execute(stmt).scalar_one())


def bucket_width(span_ms: int, target: int = TARGET_BUCKETS) -> int:
    """The smallest "nice" width that covers ``span_ms`` in at most ``target`` buckets."""
    for width in NICE_WIDTHS_MS:
        if span_ms <= width * target:
            return width
    return NICE_WIDTHS_MS[-1] * (-(-span_ms // (NICE_WIDTHS_MS[-1] * target)))


def decision_buckets(store: AuditStore, filters: Filters, now_ms: int) -> Chart:
    """Matching decisions per time bucket and action.

    The chart spans ``since_ms``..``until_ms`` (default: now); without ``since_ms`` it starts at
    the first matching decision. Buckets are aligned to whole multiples of their width.
    """
    d = DecisionRow
    conds = filters.conditions()
    end = filters.until_ms if filters.until_ms is not None else now_ms
    start = filters.since_ms
    if start is None:
        with store.engine.connect() as conn:
            first, last = conn.execute(
                select(func.min(d.event_time), func.max(d.event_time)).where(*conds)
            ).one()
        if first is None:
            start = end - 3_600_000
        else:
            start = int(first)
            end = max(end, int(last) + 1)
    end = max(end, start + 1)
    width = bucket_width(end - start)
    start -= start % width
    n = -(-(end - start) // width)
    # Integer division (``//`` renders it on both dialects); operands are never negative.
    bucket = (d.event_time - start) // width
    stmt = (
        select(bucket.label("bucket"), d.action, func.count().label("n"))
        .where(*conds, d.event_time >= start, d.event_time < start + n * width)
        .group_by(bucket, d.action)
    )
    buckets: list[dict[str, int]] = [dict.fromkeys(ACTION_ORDER, 0) for _ in range(n)]
    with store.engine.connect() as conn:
        for row in conn.execute(stmt):
            index = int(row.bucket)
            if 0 <= index < n and row.action in buckets[index]:
                buckets[index][row.action] += int(row.n)
    return Chart(start_ms=start, width_ms=width, buckets=buckets)


def top_values(
    store: AuditStore, filters: Filters, column: str, limit: int = 5
) -> list[tuple[str, int]]:
    """The ``column`` values (``agent_id``, ``tool_name``, ``detector``) with most decisions."""
    if column not in ("agent_id", "tool_name", "detector", "gateway_id"):
        raise ValueError(f"cannot rank by {column!r}")
    col = getattr(DecisionRow, column)
    n = func.count().label("n")
    stmt = (
        select(col, n)
        .where(*filters.conditions())
        .group_by(col)
        .order_by(n.desc(), col)
        .limit(limit)
    )
    with store.engine.connect() as conn:
        return [(value, int(count)) for value, count in conn.execute(stmt)]


def facets(store: AuditStore, limit: int = 500) -> dict[str, list[str]]:
    """Known agents and detectors (for the filter controls), sorted, at most ``limit`` each."""
    out: dict[str, list[str]] = {}
    with store.engine.connect() as conn:
        for name, col in (("agents", DecisionRow.agent_id), ("detectors", DecisionRow.detector)):
            stmt = select(col).distinct().order_by(col).limit(limit)
            out[name] = [value for (value,) in conn.execute(stmt)]
    return out


def run_timeline(store: AuditStore, run_id: str) -> Timeline:
    """A run's decisions in the order the run produced them, and its progress record (its
    status as :func:`~streams.audit.observed.reported_status` reports it)."""
    decisions = store.history(run_id)
    progress = store.run_progress(run_id)
    if progress is not None:
        enforced_abort = any(d.enforced and d.action is Action.ABORT for d in decisions)
        status = reported_status(progress.status, enforced_abort)
        progress = replace(progress, status=status or "")
    usage = store.run_usage([run_id]).get(run_id)
    return Timeline(run_id=run_id, progress=progress, decisions=decisions, usage=usage)


def trail_overview(store: AuditStore) -> Overview:
    """Counts that say whether the trail is being written."""
    with store.engine.connect() as conn:
        decisions, last = conn.execute(select(func.count(), func.max(DecisionRow.event_time))).one()
        dead = conn.execute(select(func.count()).select_from(DeadLetter)).scalar_one()
        runs = conn.execute(select(func.count()).select_from(ProcessedEvent)).scalar_one()
        u = RunUsageRow
        usage_runs, loop_tokens, saved = conn.execute(
            select(func.count(), func.sum(u.loop_tokens), func.sum(u.saved_tokens))
        ).one()
    return Overview(
        decisions=int(decisions),
        dead_letters=int(dead),
        runs_tracked=int(runs),
        last_decision_time=None if last is None else int(last),
        loop_tokens=int(loop_tokens or 0),
        saved_tokens=int(saved or 0),
        usage_runs=int(usage_runs),
    )


def severity(action: str) -> int:
    """0 for unknown, then warn < block < abort."""
    return ACTION_ORDER.index(action) + 1 if action in ACTION_ORDER else 0


__all__: Sequence[str] = (
    "ACTION_ORDER",
    "Chart",
    "Filters",
    "Overview",
    "RunLine",
    "Timeline",
    "bucket_width",
    "count_runs",
    "decision_buckets",
    "facets",
    "grouped_runs",
    "run_timeline",
    "severity",
    "top_values",
    "trail_overview",
)
