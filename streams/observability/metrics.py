"""The worker's Prometheus metrics, served as ``GET /metrics`` by :mod:`streams.web`.

One :class:`WorkerMetrics` per worker owns its own ``CollectorRegistry`` (never the
process-global one), so tests and several apps in one process never share counters. The
worker calls a handful of plain methods; every one is cheap, thread-safe and never raises
on odd input, so instrumentation cannot take the stream down.

Metric names (all prefixed ``loopguard_``; ``compose/grafana/dashboards/loopguard.json``
queries them and ``tests/unit/test_compose.py`` checks that every name it uses exists):

=============================================  =========  ==================================
``loopguard_events_total{type}``               counter    events consumed, by event kind
``loopguard_decisions_total{action,detector,   counter    decisions published; enforced
agent,tool,enforced}``                                    "false": observe-only (shadow mode)
``loopguard_dead_letters_total{kind}``         counter    messages parked, by error kind
``loopguard_consumer_lag{partition}``          gauge      events not yet read, per partition
``loopguard_runs_in_table``                    gauge      runs held in this worker's table
``loopguard_runs_cap``                         gauge      LOOPGUARD_MAX_RUNS (0: no cap)
``loopguard_runs_evicted_total{reason}``       counter    runs evicted at the cap, by class
``loopguard_audit_backlog``                    gauge      audit records waiting for the DB
``loopguard_audit_records_written_total``      counter    rows the audit trail accepted
``loopguard_audit_write_errors_total``         counter    failed audit writes (retried)
``loopguard_audit_quarantined_total``          counter    audit records the database refused
                                                          for their data, kept in quarantine
``loopguard_event_processing_seconds``         histogram  one event: decode → decisions sent
``loopguard_gateway_wait_timeouts_total        counter    gateways that gave up waiting for a
{gateway}``                                               decision (when they report it)
``loopguard_last_event_timestamp_seconds``     gauge      wall-clock time of the last event
``loopguard_worker_start_time_seconds``        gauge      when this worker started
``loopguard_webhook_notifications_total        counter    block/abort webhooks by outcome:
{outcome}``                                               sent, failed, dropped (queue full)
``loopguard_webhook_retries_total``            counter    webhook posts retried
``loopguard_webhook_queue``                    gauge      webhooks waiting to be posted
``loopguard_loop_tokens_total``                counter    tokens runs reported while looping
                                                          (from their first loop decision)
``loopguard_tokens_saved_estimate_total``      counter    tokens block/abort saved, estimated
                                                          (docs/reference.md: loop cost)
=============================================  =========  ==================================

``agent``, ``tool`` and ``gateway`` come from the events, so each keeps at most
``max_label_values`` distinct values (first come, first kept); the rest are counted under
``"_other"``. That bounds the series a misbehaving fleet can create.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = [
    "CONTENT_TYPE",
    "METRIC_NAMES",
    "OTHER",
    "WorkerMetrics",
    "dead_letter_kind",
    "unread_records",
]


def unread_records(consumer: Any, topic: str) -> int:
    """Records on ``topic``'s partitions assigned to ``consumer`` (a Faust consumer) that it
    has not read yet, as :meth:`WorkerMetrics.sample_consumer_lag` counts them; /healthz
    reports the control topic's as the audit agent's backlog (issue 26)."""
    total = 0
    read = getattr(consumer, "_read_offset", {})
    committed = getattr(consumer, "_committed_offset", {})
    try:
        assigned = [tp for tp in consumer.assignment() if tp.topic == topic]
    except Exception:  # noqa: BLE001 - consumer not started / restarting
        return 0
    for tp in assigned:
        try:
            end = consumer.highwater(tp)
        except Exception:  # noqa: BLE001 - not fetched yet / consumer restarting
            continue
        last_read = read.get(tp)
        position = last_read + 1 if last_read is not None else committed.get(tp)
        if end is not None and position is not None:
            total += max(0, end - position)
    return total


#: What ``/metrics`` answers with: Prometheus' text exposition format 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER = "_other"
DEFAULT_MAX_LABEL_VALUES = 500
UNKNOWN = "unknown"

# Event processing is sub-millisecond in the core; Kafka and the changelog dominate.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)

#: Every time series family the registry exposes (counter families without ``_total``; the
#: exposition adds ``_total``/``_created``, histograms ``_bucket``/``_sum``/``_count``).
METRIC_NAMES = (
    "loopguard_events",
    "loopguard_decisions",
    "loopguard_dead_letters",
    "loopguard_consumer_lag",
    "loopguard_runs_in_table",
    "loopguard_runs_cap",
    "loopguard_runs_evicted",
    "loopguard_audit_backlog",
    "loopguard_audit_records_written",
    "loopguard_audit_write_errors",
    "loopguard_audit_quarantined",
    "loopguard_event_processing_seconds",
    "loopguard_gateway_wait_timeouts",
    "loopguard_last_event_timestamp_seconds",
    "loopguard_worker_start_time_seconds",
    "loopguard_webhook_notifications",
    "loopguard_webhook_retries",
    "loopguard_webhook_queue",
    "loopguard_loop_tokens",
    "loopguard_tokens_saved_estimate",
)


def dead_letter_kind(error: str | BaseException) -> str:
    """A short, bounded label for why a message was parked.

    A codec exception gives its class in snake case without ``Error``
    (``PayloadTooLargeError`` → ``payload_too_large``); a plain string is the processor's
    refusal of a decoded event (``invalid_event``), unless it already is a short label.
    """
    if isinstance(error, BaseException):
        name = type(error).__name__.removesuffix("Error") or type(error).__name__
        return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    if re.fullmatch(r"[a-z][a-z0-9_]{0,39}", error):
        return error
    return "invalid_event"


class _Bounded:
    """Keeps at most ``limit`` distinct label values; later newcomers map to ``_other``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: Any) -> str:
        text = str(value) if value not in (None, "") else UNKNOWN
        if text in self._seen:
            return text
        with self._lock:
            if len(self._seen) < self.limit:
                self._seen.add(text)
                return text
        return OTHER


class WorkerMetrics:
    """The worker's counters, gauges and latency histogram, in a registry of its own."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._agent = _Bounded(max_label_values)
        self._tool = _Bounded(max_label_values)
        self._gateway = _Bounded(max_label_values)
        self._partitions: set[int] = set()
        self._lock = threading.Lock()

        self.events = Counter(
            "loopguard_events", "Agent events consumed, by event type.", ["type"], registry=r
        )
        self.decisions = Counter(
            "loopguard_decisions",
            "Loop decisions published to the control topic.",
            ["action", "detector", "agent", "tool", "enforced"],
            registry=r,
        )
        self.dead_letters = Counter(
            "loopguard_dead_letters",
            "Messages parked on the dead-letter topic, by error kind.",
            ["kind"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "loopguard_consumer_lag",
            "Events on this worker's events partitions not read yet (end offset - position).",
            ["partition"],
            registry=r,
        )
        self.runs_in_table = Gauge(
            "loopguard_runs_in_table", "Runs held in this worker's state table.", registry=r
        )
        self.runs_cap = Gauge(
            "loopguard_runs_cap", "Most runs this worker holds (0: no cap).", registry=r
        )
        self.runs_evicted = Counter(
            "loopguard_runs_evicted",
            "Runs evicted from the table at the cap, by class (ended, idle, enforced).",
            ["reason"],
            registry=r,
        )
        self.audit_backlog = Gauge(
            "loopguard_audit_backlog",
            "Audit records (decisions, dead letters) waiting to be written to the database.",
            registry=r,
        )
        self.audit_records = Counter(
            "loopguard_audit_records_written",
            "Records the audit database accepted (redeliveries it already had excluded).",
            registry=r,
        )
        self.audit_errors = Counter(
            "loopguard_audit_write_errors",
            "Failed audit writes; each is retried, so this counts outages, not lost records.",
            registry=r,
        )
        self.audit_quarantine = Counter(
            "loopguard_audit_quarantined",
            "Audit records the database refused for their data, kept in audit_quarantine.",
            registry=r,
        )
        self.latency = Histogram(
            "loopguard_event_processing_seconds",
            "Time to process one event, from decode to its decisions being sent.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.gateway_timeouts = Counter(
            "loopguard_gateway_wait_timeouts",
            "Gateways that gave up waiting for a run's decision, as the gateways report them.",
            ["gateway"],
            registry=r,
        )
        self.last_event = Gauge(
            "loopguard_last_event_timestamp_seconds",
            "Unix time at which this worker consumed its most recent event.",
            registry=r,
        )
        self.started = Gauge(
            "loopguard_worker_start_time_seconds",
            "Unix time at which this worker's metrics were created.",
            registry=r,
        )
        self.webhooks = Counter(
            "loopguard_webhook_notifications",
            "Block/abort webhook notifications, by outcome (sent, failed, dropped).",
            ["outcome"],
            registry=r,
        )
        self.webhook_retries = Counter(
            "loopguard_webhook_retries", "Webhook posts retried after a failure.", registry=r
        )
        self.webhook_queue = Gauge(
            "loopguard_webhook_queue", "Webhook notifications waiting to be posted.", registry=r
        )
        self.loop_tokens = Counter(
            "loopguard_loop_tokens",
            "Tokens (read + written) runs reported from their first loop decision on.",
            registry=r,
        )
        self.tokens_saved = Counter(
            "loopguard_tokens_saved_estimate",
            "Estimated tokens that blocking or aborting looping runs saved (streams.core.usage).",
            registry=r,
        )
        self.started_at = time.time()
        self.started.set(self.started_at)
        self.last_event_at: float | None = None

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
        seconds = max(0.0, seconds)
        for _ in range(n):
            self.latency.observe(seconds)

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
        """Set ``loopguard_consumer_lag`` from a Faust consumer, for ``topic``'s partitions.

        Lag is the partition's end offset minus the next offset this worker will read (the
        last read offset + 1, or the committed offset before anything was read). Partitions
        no longer assigned are dropped; one whose end offset is unknown yet is skipped.
        """
        assigned = [tp for tp in consumer.assignment() if tp.topic == topic]
        read = getattr(consumer, "_read_offset", {})
        committed = getattr(consumer, "_committed_offset", {})
        for tp in assigned:
            try:
                end = consumer.highwater(tp)
            except Exception:  # noqa: BLE001 - not fetched yet / consumer restarting
                continue
            if end is None:
                continue
            last_read = read.get(tp)
            position = last_read + 1 if last_read is not None else committed.get(tp)
            if position is None:
                continue
            self.set_lag(tp.partition, end - position)
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
