"""The worker's metrics recorder, served as ``GET /metrics`` by :mod:`streams.web`.

One :class:`WorkerMetrics` per worker owns its own ``CollectorRegistry`` (the families and
their names: :mod:`streams.observability.metric_families`), so tests and several apps in
one process never share counters. The worker calls a handful of plain methods; every one is
cheap, thread-safe and never raises on odd input, so instrumentation cannot take the stream
down. ``agent``, ``tool`` and ``gateway`` labels are bounded
(:mod:`streams.observability.metric_labels`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from streams.observability.consumer_lag import (
    assigned_partitions,
    partition_lags,
    unread_records,
)
from streams.observability.metric_families import CONTENT_TYPE, METRIC_NAMES, MetricFamilies
from streams.observability.metric_labels import (
    DEFAULT_MAX_LABEL_VALUES,
    OTHER,
    UNKNOWN,
    BoundedLabels,
    dead_letter_kind,
)
from streams.observability.stage_ages import StageAges

__all__ = [
    "CONTENT_TYPE",
    "METRIC_NAMES",
    "OTHER",
    "WorkerMetrics",
    "dead_letter_kind",
    "unread_records",
]


class WorkerMetrics(MetricFamilies):
    """The worker's counters, gauges and latency histogram, in a registry of its own."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
    ) -> None:
        super().__init__(registry)
        self._agent = BoundedLabels(max_label_values)
        self._tool = BoundedLabels(max_label_values)
        self._gateway = BoundedLabels(max_label_values)
        self._partitions: set[int] = set()
        self._lock = threading.Lock()
        self.started_at = time.time()
        self.started.set(self.started_at)
        self.last_event_at: float | None = None
        self.stage_ages = StageAges(self.stage_age)  # loopguard_event_stage_age_seconds

    # -- called by the worker ---------------------------------------------------------------

    def observe_event(self, kind: str, n: int = 1) -> None:
        """``n`` events consumed; ``kind`` is their type (``tool_call``, ``tool_result``, ...)."""
        self.events.labels(type=kind or UNKNOWN).inc(n)
        now = time.time()
        self.last_event_at = now
        self.last_event.set(now)

    def observe_decision(self, decision: Any) -> None:
        """One decision published (a :class:`~streams.core.events.Decision`)."""
        action = getattr(decision.action, "value", decision.action)
        self.decisions.labels(
            action=str(action),
            detector=decision.detector or UNKNOWN,
            agent=self._agent(decision.agent_id),
            tool=self._tool(decision.tool_name),
            enforced="false" if getattr(decision, "enforced", True) is False else "true",
        ).inc()

    def observe_decisions(self, decisions: Iterable[Any]) -> None:
        for decision in decisions:
            self.observe_decision(decision)

    def observe_settle_round(self, seconds: float) -> None:
        """One settling round committed (exactly once), ``seconds`` from start to commit."""
        self.settle_round.observe(max(0.0, seconds))

    def observe_dead_letter(self, kind: str | BaseException, n: int = 1) -> None:
        """``n`` messages parked; ``kind``: a short label or the exception (dead_letter_kind)."""
        self.dead_letters.labels(kind=dead_letter_kind(kind)).inc(n)

    def set_lag(self, partition: int, lag: int | float) -> None:
        """Events on events-topic ``partition`` not yet read by this worker."""
        with self._lock:
            self._partitions.add(int(partition))
            self.consumer_lag.labels(partition=str(int(partition))).set(max(0, lag))

    def clear_lag(self, partition: int) -> None:
        """Stop reporting a partition this worker no longer owns (after a rebalance)."""
        with self._lock:
            if int(partition) in self._partitions:
                self._partitions.discard(int(partition))
                self.consumer_lag.remove(str(int(partition)))

    def retain_partitions(self, partitions: Iterable[int]) -> None:
        """Keep lag series only for ``partitions`` (call with the new assignment)."""
        keep = {int(p) for p in partitions}
        for partition in sorted(self._partitions - keep):
            self.clear_lag(partition)

    def set_runs(self, n: int) -> None:
        """Runs currently held in this worker's table."""
        self.runs_in_table.set(n)

    def set_runs_cap(self, cap: int) -> None:
        self.runs_cap.set(cap)

    def runs_evicted_for(self, reason: str, n: int = 1) -> None:
        """``n`` runs evicted at the cap; ``reason``: their class (streams.state.expiry)."""
        self.runs_evicted.labels(reason=reason).inc(n)

    def observe_latency(self, seconds: float, n: int = 1) -> None:
        """Processing time of one event, in seconds; ``n`` events of a batch that took
        ``seconds`` each on average."""
        self.latency.observe(max(0.0, seconds), n)  # one call for the batch's n events

    def observe_event_ages(self, now: float, timestamps: Iterable[float | None]) -> None:
        """How old each event of a batch was when the worker took it in (``now`` and the
        broker timestamps in epoch seconds; an event without one is skipped). A clock ahead
        of the gateway's counts 0."""
        self.event_age.observe_each(
            max(0.0, now - stamp) for stamp in timestamps if stamp is not None
        )

    def audit_written(self, n: int = 1) -> None:
        """``n`` records were newly written to the audit trail."""
        if n > 0:
            self.audit_records.inc(n)

    def audit_error(self) -> None:
        """One audit write failed (it will be retried)."""
        self.audit_errors.inc()

    def audit_quarantined(self, n: int = 1) -> None:
        """``n`` records the database refused went to the quarantine."""
        if n > 0:
            self.audit_quarantine.inc(n)

    def set_audit_backlog(self, n: int) -> None:
        """Audit records received but not yet written."""
        self.audit_backlog.set(max(0, n))

    def observe_gateway_timeout(self, gateway_id: str) -> None:
        """A gateway reported that it stopped waiting for a decision."""
        self.gateway_timeouts.labels(gateway=self._gateway(gateway_id)).inc()

    def webhook_outcome(self, outcome: str, n: int = 1) -> None:
        """``n`` webhook notifications ended as ``outcome`` (sent, failed, dropped)."""
        if n > 0:
            self.webhooks.labels(outcome=outcome).inc(n)

    def webhook_retry(self) -> None:
        """One webhook post failed and will be tried again."""
        self.webhook_retries.inc()

    def set_webhook_queue(self, n: int) -> None:
        """Webhook notifications queued in this worker."""
        self.webhook_queue.set(max(0, n))

    def observe_loop_cost(self, loop_tokens: int, saved_tokens: int) -> None:
        """Tokens looping runs spent, and the estimate of what stopping them saved (issue 28)."""
        if loop_tokens > 0:
            self.loop_tokens.inc(loop_tokens)
        if saved_tokens > 0:
            self.tokens_saved.inc(saved_tokens)

    async def sample_consumer_lag(self, consumer: Any, topic: str) -> None:
        """Set ``loopguard_consumer_lag`` from a Faust consumer, for ``topic``'s partitions
        (counted as :mod:`streams.observability.consumer_lag` says). Partitions no longer
        assigned are dropped; one whose end offset is unknown yet is skipped."""
        assigned = assigned_partitions(consumer, topic)
        for partition, lag in partition_lags(consumer, assigned).items():
            self.set_lag(partition, lag)
        self.retain_partitions(tp.partition for tp in assigned)

    # -- read back: /metrics, the status page, health ---------------------------------------

    def render(self) -> bytes:
        """The registry in Prometheus' text format (:data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)

    def _total(self, family: Counter | Gauge) -> float:
        return sum(
            sample.value
            for metric in family.collect()
            for sample in metric.samples
            if not sample.name.endswith("_created")
        )

    def _value(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.registry.get_sample_value(name, labels or {}) or 0.0

    def snapshot(self) -> dict[str, Any]:
        """What the status page and ``/healthz`` show about this worker, as plain values."""
        with self._lock:
            partitions = sorted(self._partitions)
        lag = {
            p: int(self._value("loopguard_consumer_lag", {"partition": str(p)})) for p in partitions
        }
        count = self._value("loopguard_event_processing_seconds_count")
        total = self._value("loopguard_event_processing_seconds_sum")
        now = time.time()
        return {
            "uptime_seconds": round(now - self.started_at, 1),
            "events": int(self._total(self.events)),
            "decisions": int(self._total(self.decisions)),
            "dead_letters": int(self._total(self.dead_letters)),
            "last_event_age_seconds": (
                round(now - self.last_event_at, 1) if self.last_event_at is not None else None
            ),
            "partitions": partitions,
            "lag": lag,
            "lag_total": sum(lag.values()),
            "runs_in_table": int(self._value("loopguard_runs_in_table")),
            "audit_backlog": int(self._value("loopguard_audit_backlog")),
            "audit_records_written": int(self._total(self.audit_records)),
            "audit_write_errors": int(self._total(self.audit_errors)),
            "audit_quarantined": int(self._total(self.audit_quarantine)),
            "mean_processing_ms": round(total / count * 1000, 3) if count else None,
        }
