"""WorkerMetrics: Prometheus-conventional names, its own registry, bounded labels, and the
plain values the status page and /healthz read back."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from dataclasses import replace

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from streams.core.events import Action, Decision
from streams.observability.metrics import (
    CONTENT_TYPE,
    METRIC_NAMES,
    OTHER,
    WorkerMetrics,
    dead_letter_kind,
)
from streams.wire.errors import BadMarkerError, PayloadTooLargeError, UnknownSchemaError

TP = namedtuple("TP", "topic partition")


def decision(action=Action.BLOCK, agent="coder", tool="exec", detector="ping_pong") -> Decision:
    return Decision(
        run_id="r1",
        agent_id=agent,
        gateway_id="gw",
        seq=3,
        event_time=1,
        action=action,
        detector=detector,
        severity="critical",
        count=4,
        tool_name=tool,
        reason="loop",
    )


def families(metrics: WorkerMetrics) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def sample(metrics: WorkerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_names_types_and_exposition_format() -> None:
    m = WorkerMetrics()
    found = families(m)
    assert set(METRIC_NAMES) <= set(found)
    assert all(name.startswith("loopguard_") for name in found)
    kinds = {name: found[name].type for name in METRIC_NAMES}
    assert kinds["loopguard_events"] == "counter"
    assert kinds["loopguard_decisions"] == "counter"
    assert kinds["loopguard_dead_letters"] == "counter"
    assert kinds["loopguard_audit_records_written"] == "counter"
    assert kinds["loopguard_audit_write_errors"] == "counter"
    assert kinds["loopguard_gateway_wait_timeouts"] == "counter"
    assert kinds["loopguard_consumer_lag"] == "gauge"
    assert kinds["loopguard_runs_in_table"] == "gauge"
    assert kinds["loopguard_audit_backlog"] == "gauge"
    assert kinds["loopguard_event_processing_seconds"] == "histogram"
    assert kinds["loopguard_last_event_timestamp_seconds"] == "gauge"
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    text = m.render().decode()
    assert "# TYPE loopguard_events_total counter" in text
    assert "# TYPE loopguard_event_processing_seconds histogram" in text


def test_settle_rounds_are_a_histogram_of_seconds() -> None:
    m = WorkerMetrics()
    assert families(m)["loopguard_settle_round_seconds"].type == "histogram"
    m.observe_settle_round(0.12)
    m.observe_settle_round(1.6)
    m.observe_settle_round(-0.001)  # a clock step back counts as no time, never raises
    assert sample(m, "loopguard_settle_round_seconds_count") == 3
    assert sample(m, "loopguard_settle_round_seconds_bucket", le="0.25") == 2
    assert sample(m, "loopguard_settle_round_seconds_sum") == pytest.approx(1.72)


def test_each_instance_has_its_own_registry() -> None:
    a, b = WorkerMetrics(), WorkerMetrics()
    a.observe_event("tool_call")
    assert sample(a, "loopguard_events_total", type="tool_call") == 1
    assert sample(b, "loopguard_events_total", type="tool_call") is None
    assert REGISTRY.get_sample_value("loopguard_events_total", {"type": "tool_call"}) is None


def test_events_decisions_dead_letters() -> None:
    m = WorkerMetrics()
    for kind in ("tool_call", "tool_call", "tool_result", ""):
        m.observe_event(kind)
    assert sample(m, "loopguard_events_total", type="tool_call") == 2
    assert sample(m, "loopguard_events_total", type="tool_result") == 1
    assert sample(m, "loopguard_events_total", type="unknown") == 1
    assert m.last_event_at is not None
    assert sample(m, "loopguard_last_event_timestamp_seconds") == pytest.approx(m.last_event_at)

    m.observe_decisions([decision(), decision(Action.WARN), decision(tool="")])
    labels = {
        "action": "block",
        "detector": "ping_pong",
        "agent": "coder",
        "tool": "exec",
        "enforced": "true",
    }
    assert sample(m, "loopguard_decisions_total", **labels) == 1
    assert sample(m, "loopguard_decisions_total", **{**labels, "action": "warn"}) == 1
    assert sample(m, "loopguard_decisions_total", **{**labels, "tool": "unknown"}) == 1
    m.observe_decisions([replace(decision(), enforced=False)] * 2)  # mode "observe"
    assert sample(m, "loopguard_decisions_total", **{**labels, "enforced": "false"}) == 2
    assert sample(m, "loopguard_decisions_total", **labels) == 1

    m.observe_dead_letter(PayloadTooLargeError(10, 5))
    m.observe_dead_letter("seq must be 1 or more (run sequences start at 1), got 0")
    m.observe_dead_letter("decode")
    assert sample(m, "loopguard_dead_letters_total", kind="payload_too_large") == 1
    assert sample(m, "loopguard_dead_letters_total", kind="invalid_event") == 1
    assert sample(m, "loopguard_dead_letters_total", kind="decode") == 1


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (BadMarkerError("x"), "bad_marker"),
        (UnknownSchemaError(b"\x01"), "unknown_schema"),
        (PayloadTooLargeError(2, 1), "payload_too_large"),
        (ValueError("x"), "value"),
        ("schema_mismatch", "schema_mismatch"),
        ("Something <odd> happened", "invalid_event"),
        ("x" * 60, "invalid_event"),
    ],
)
def test_dead_letter_kind(error, kind) -> None:
    assert dead_letter_kind(error) == kind


def test_agent_and_tool_labels_are_bounded() -> None:
    m = WorkerMetrics(max_label_values=3)
    for i in range(10):
        m.observe_decision(decision(agent=f"agent-{i}", tool=f"tool-{i}"))
        m.observe_gateway_timeout(f"gw-{i}")
    text = m.render().decode()
    assert 'agent="agent-2"' in text and 'agent="agent-3"' not in text
    other = {
        "action": "block",
        "detector": "ping_pong",
        "agent": OTHER,
        "tool": OTHER,
        "enforced": "true",
    }
    assert sample(m, "loopguard_decisions_total", **other) == 7
    assert sample(m, "loopguard_gateway_wait_timeouts_total", gateway=OTHER) == 7
    assert sample(m, "loopguard_gateway_wait_timeouts_total", gateway="gw-0") == 1
    m.observe_decision(decision(agent="agent-1", tool="tool-1"))  # a kept value stays kept
    assert sample(m, "loopguard_decisions_total", **{**other, "agent": "agent-1", "tool": "tool-1"})


def test_hostile_label_values_are_escaped_by_the_exposition() -> None:
    m = WorkerMetrics()
    m.observe_decision(decision(agent='a"b\\c\nd', tool="<script>"))
    found = families(m)  # parses: quotes, backslashes and newlines were escaped
    labels = [s.labels for s in found["loopguard_decisions"].samples if s.name.endswith("_total")]
    assert labels == [
        {
            "action": "block",
            "detector": "ping_pong",
            "agent": 'a"b\\c\nd',
            "tool": "<script>",
            "enforced": "true",
        }
    ]


def test_lag_per_partition_and_rebalance() -> None:
    m = WorkerMetrics()
    m.set_lag(0, 5)
    m.set_lag(3, -2)  # clamped: an end offset fetched before the position moved
    assert sample(m, "loopguard_consumer_lag", partition="0") == 5
    assert sample(m, "loopguard_consumer_lag", partition="3") == 0
    m.retain_partitions([3])
    assert sample(m, "loopguard_consumer_lag", partition="0") is None
    m.clear_lag(3)
    m.clear_lag(7)  # never reported: nothing to do
    assert "loopguard_consumer_lag{" not in m.render().decode()


class FakeConsumer:
    def __init__(self) -> None:
        self.tps = [TP("ev", 0), TP("ev", 1), TP("ev", 2), TP("other", 0), TP("ev", 3)]
        self._read_offset = {TP("ev", 0): 9, TP("ev", 1): None}
        self._committed_offset = {TP("ev", 1): 4}
        self.ends = {TP("ev", 0): 15, TP("ev", 1): 10, TP("ev", 2): None, TP("other", 0): 99}

    def assignment(self):
        return set(self.tps)

    def highwater(self, tp):
        if tp == TP("ev", 3):
            raise RuntimeError("not fetched yet")
        return self.ends[tp]


def test_sample_consumer_lag_from_a_faust_consumer() -> None:
    m = WorkerMetrics()
    m.set_lag(8, 1)  # a partition this worker lost in a rebalance
    consumer = FakeConsumer()
    asyncio.run(m.sample_consumer_lag(consumer, "ev"))
    assert sample(m, "loopguard_consumer_lag", partition="0") == 5  # 15 - (9 + 1)
    assert sample(m, "loopguard_consumer_lag", partition="1") == 6  # 10 - committed 4
    assert sample(m, "loopguard_consumer_lag", partition="2") is None  # end unknown
    assert sample(m, "loopguard_consumer_lag", partition="3") is None
    assert sample(m, "loopguard_consumer_lag", partition="8") is None


def test_gauges_latency_audit_and_snapshot() -> None:
    m = WorkerMetrics()
    snap = m.snapshot()
    assert snap["events"] == 0 and snap["last_event_age_seconds"] is None
    assert snap["mean_processing_ms"] is None and snap["lag"] == {}

    m.set_runs(12)
    m.set_audit_backlog(40)
    m.set_audit_backlog(-1)
    m.set_audit_backlog(7)
    m.audit_written(3)
    m.audit_written(0)
    m.audit_error()
    m.observe_latency(0.002)
    m.observe_latency(0.004)
    m.observe_latency(-1)  # a clock step: counted as 0
    m.set_lag(1, 4)
    m.set_lag(0, 2)
    m.observe_event("tool_call")
    m.observe_decision(decision())
    m.observe_dead_letter("decode")

    assert sample(m, "loopguard_runs_in_table") == 12
    assert sample(m, "loopguard_audit_backlog") == 7
    assert sample(m, "loopguard_audit_records_written_total") == 3
    assert sample(m, "loopguard_audit_write_errors_total") == 1
    assert sample(m, "loopguard_event_processing_seconds_count") == 3
    assert sample(m, "loopguard_event_processing_seconds_bucket", le="0.0025") == 2
    snap = m.snapshot()
    assert snap["runs_in_table"] == 12 and snap["audit_backlog"] == 7
    assert snap["audit_records_written"] == 3 and snap["audit_write_errors"] == 1
    assert snap["events"] == 1 and snap["decisions"] == 1 and snap["dead_letters"] == 1
    assert snap["partitions"] == [0, 1] and snap["lag"] == {0: 2, 1: 4}
    assert snap["lag_total"] == 6
    assert snap["mean_processing_ms"] == 2.0
    assert 0 <= snap["last_event_age_seconds"] < 5


def test_event_ages_are_observed_per_event_from_their_timestamps() -> None:
    m = WorkerMetrics()
    m.observe_event_ages(100.0, [99.996, 99.975, None, 100.5])  # 4 ms, 25 ms, none, a clock ahead
    assert sample(m, "loopguard_event_age_seconds_count") == 3
    assert sample(m, "loopguard_event_age_seconds_bucket", le="0.005") == 2  # 4 ms and 0
    assert sample(m, "loopguard_event_age_seconds_bucket", le="0.03") == 3
    assert sample(m, "loopguard_event_age_seconds_sum") == pytest.approx(0.029)
