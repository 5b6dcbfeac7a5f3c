"""The worker's Prometheus families: every name, help text and bucket that ``/metrics``
exposes, created on a registry of the worker's own (never the process-global one).

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
``loopguard_runs_evicted_total{reason}``       counter    runs evicted at the cap, by class or quota
``loopguard_audit_backlog``                    gauge      audit records waiting for the DB
``loopguard_audit_records_written_total``      counter    rows the audit trail accepted
``loopguard_audit_write_errors_total``         counter    failed audit writes (retried)
``loopguard_audit_quarantined_total``          counter    audit records the database refused
                                                          for their data, kept in quarantine
``loopguard_event_processing_seconds``         histogram  one event: decode → decisions sent
``loopguard_event_age_seconds``                histogram  an event's timestamp → taken in by
                                                          the worker (the broker path's share)
``loopguard_event_stage_age_seconds{stage}``   histogram  an event's age at each stage: fetched,
                                                          handed, taken, decided, published (one
                                                          observation per fetch or batch,
                                                          :mod:`~streams.observability.stage_ages`)
``loopguard_settle_round_seconds``             histogram  exactly once: one settling round of
                                                          the guarding agent (its batches'
                                                          deliveries, state, acks and commit):
                                                          how far committed state trails the
                                                          decisions already out
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
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streams.observability.counted_histogram import CountedHistogram

#: What ``/metrics`` answers with: Prometheus' text exposition format 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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

# An event's age when the worker takes it in: milliseconds on a healthy cluster, seconds in a
# backlog (then the consumer lag says why).
AGE_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
)  # fmt: skip

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
    "loopguard_event_age_seconds",
    "loopguard_event_stage_age_seconds",
    "loopguard_settle_round_seconds",
    "loopguard_gateway_wait_timeouts",
    "loopguard_last_event_timestamp_seconds",
    "loopguard_worker_start_time_seconds",
    "loopguard_webhook_notifications",
    "loopguard_webhook_retries",
    "loopguard_webhook_queue",
    "loopguard_loop_tokens",
    "loopguard_tokens_saved_estimate",
)


class MetricFamilies:
    """The families of :data:`METRIC_NAMES` on ``registry`` (a fresh one if not given)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
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
            "Runs evicted from the table at the cap, by class (ended, idle, enforced), or over "
            "their gateway's quota (quota).",
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
        # A batch's observations in one call each (streams.observability.counted_histogram).
        self.latency = CountedHistogram(
            "loopguard_event_processing_seconds",
            "Time to process one event, from decode to its decisions being sent.",
            LATENCY_BUCKETS,
            r,
        )
        self.event_age = CountedHistogram(
            "loopguard_event_age_seconds",
            "Time from an event's timestamp (its gateway's send, as the broker stored it) to the "
            "worker taking it into a batch: the broker path's share of decision latency (Kafka "
            "Streams' record-e2e-latency).",
            AGE_BUCKETS,
            r,
        )
        self.stage_age = Histogram(
            "loopguard_event_stage_age_seconds",
            "An event's age (now - its broker timestamp) at each stage of the guarding path: "
            "fetched by the consumer, handed to the stream, taken by the guarding agent, "
            "decided, published; one observation per fetch (its oldest events record) or per "
            "batch (its first event).",
            ["stage"],
            buckets=AGE_BUCKETS,
            registry=r,
        )
        self.settle_round = Histogram(
            "loopguard_settle_round_seconds",
            "Exactly once: one settling round of the guarding agent, from taking its queued "
            "batches to their transactions' commit (deliveries awaited, state records sent, "
            "events acked, offsets committed). A worker killed mid-round is succeeded from the "
            "last commit, so this is how far committed state trails the decisions already out.",
            buckets=AGE_BUCKETS,
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
