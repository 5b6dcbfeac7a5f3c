"""The worker's /healthz fields: stalled (503) only when events wait and none comes in."""

from __future__ import annotations

import time
from types import SimpleNamespace

from streams.observability.metrics import WorkerMetrics
from streams.settings import Settings
from streams.worker import agents
from streams.worker.agents import WorkerAgents


def health(metrics: WorkerMetrics) -> dict:
    parts = SimpleNamespace(settings=Settings.for_profile("tansu"), metrics=metrics)
    return WorkerAgents(parts).health()  # type: ignore[arg-type]


def test_waiting_events_and_none_taken_in_is_stalled(monkeypatch) -> None:
    metrics = WorkerMetrics()
    assert health(metrics)["status"] == "ok"  # nothing waits: an idle worker is healthy
    metrics.retain_partitions([0])
    metrics.set_lag(0, 5)
    stalled = health(metrics)
    assert (stalled["status"], stalled["consumer_lag"]) == ("stalled", 5)
    metrics.observe_event("ToolCall")
    assert health(metrics)["status"] == "ok"  # just took one in
    monkeypatch.setattr(metrics, "last_event_at", time.time() - agents.STALL_SECONDS - 1)
    late = health(metrics)
    assert late["status"] == "stalled" and late["last_event_age_seconds"] > agents.STALL_SECONDS
    metrics.set_lag(0, 0)
    assert health(metrics)["status"] == "ok"
