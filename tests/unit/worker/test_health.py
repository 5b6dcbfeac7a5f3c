"""The worker's /healthz fields: stalled (503) only when events wait and none comes in;
degraded (200) when only the audit trail lags or fails (issue 26)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from streams.audit.writer import AuditWriter
from streams.core.events import Action, Decision
from streams.observability.metrics import WorkerMetrics
from streams.settings import Settings
from streams.worker import agents
from streams.worker.agents import WorkerAgents


class IdleConsumer:
    def assignment(self) -> set[Any]:
        return set()


def health(metrics: WorkerMetrics, audit: AuditWriter | None = None) -> dict:
    parts = SimpleNamespace(
        settings=Settings.for_profile("tansu"),
        metrics=metrics,
        audit=audit or AuditWriter("sqlite:///never-opened.db"),
        control_topic=SimpleNamespace(get_topic_name=lambda: "lg.control"),
        app=SimpleNamespace(consumer=IdleConsumer()),
    )
    return WorkerAgents(parts).health()  # type: ignore[arg-type]


def test_waiting_events_and_none_taken_in_is_stalled(monkeypatch) -> None:
    metrics = WorkerMetrics()
    assert health(metrics)["status"] == "ok"  # nothing waits: an idle worker is healthy
    metrics.retain_partitions([0])
    metrics.set_lag(0, 5)
    stalled = health(metrics)
    assert (stalled["status"], stalled["consumer_lag"]) == ("stalled", 5)
    assert stalled["processing"]["status"] == "stalled"
    metrics.observe_event("ToolCall")
    assert health(metrics)["status"] == "ok"  # just took one in
    monkeypatch.setattr(metrics, "last_event_at", time.time() - agents.STALL_SECONDS - 1)
    late = health(metrics)
    assert late["status"] == "stalled" and late["last_event_age_seconds"] > agents.STALL_SECONDS
    metrics.set_lag(0, 0)
    assert health(metrics)["status"] == "ok"


def test_failing_audit_writes_are_degraded_not_down() -> None:
    """A worker that guards while its audit database fails says so (it said "ok")."""
    writer = AuditWriter("sqlite:////proc/no-such-dir/audit.db", max_backoff=0.1)
    decision = Decision(
        run_id="r", agent_id="a", gateway_id="g", seq=1, event_time=1, action=Action.WARN,
        detector="generic_repeat", severity="warning", count=10, tool_name="exec", reason="x",
    )  # fmt: skip

    async def scenario() -> dict:
        task = asyncio.ensure_future(writer.write_decisions([decision]))
        while writer.retries < 2:
            await asyncio.sleep(0.02)
        try:
            return health(WorkerMetrics(), writer)
        finally:
            task.cancel()

    seen = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert seen["status"] == "degraded"
    assert seen["processing"]["status"] == "ok"
    audit = seen["audit"]
    assert audit["status"] == "failing" and audit["backlog"] == 1
    assert audit["last_write_age_seconds"] is None and audit["last_error"]
