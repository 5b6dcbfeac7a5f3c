"""The per-stage event age (loopguard_event_stage_age_seconds): one observation per fetch or
batch, from the broker timestamps, only for the events topic."""

from __future__ import annotations

from collections import namedtuple

from streams.observability.metrics import WorkerMetrics
from streams.observability.stage_ages import STAGES

TP = namedtuple("TP", "topic partition")
Record = namedtuple("Record", "timestamp")  # aiokafka's ConsumerRecord: timestamp in ms


def count(metrics: WorkerMetrics, stage: str) -> float:
    value = metrics.registry.get_sample_value(
        "loopguard_event_stage_age_seconds_count", {"stage": stage}
    )
    return value or 0.0


def total(metrics: WorkerMetrics, stage: str) -> float:
    value = metrics.registry.get_sample_value(
        "loopguard_event_stage_age_seconds_sum", {"stage": stage}
    )
    return value or 0.0


def test_every_stage_is_exposed_before_anything_is_observed() -> None:
    text = WorkerMetrics().render().decode()
    for stage in STAGES:
        assert f'loopguard_event_stage_age_seconds_count{{stage="{stage}"}} 0.0' in text


def test_a_batch_stage_observes_its_age_once_and_a_clock_ahead_counts_zero() -> None:
    metrics = WorkerMetrics()
    ages = metrics.stage_ages
    ages.observe("taken", 99.75, now=100.0)
    ages.observe("decided", 100.5, now=100.0)  # the gateway's clock ahead of the worker's
    ages.observe("published", None, now=100.0)  # no timestamp: nothing
    assert count(metrics, "taken") == 1 and total(metrics, "taken") == 0.25
    assert count(metrics, "decided") == 1 and total(metrics, "decided") == 0.0
    assert count(metrics, "published") == 0


def test_a_fetch_observes_its_oldest_events_record_once_then_its_hand_over() -> None:
    metrics = WorkerMetrics()
    ages = metrics.stage_ages
    ages.watch_topic("lg.events")
    now_ms = 1e12  # far in the past: ages are large and positive
    fetch = {
        TP("lg.events", 0): [Record(now_ms + 30), Record(now_ms + 40)],
        TP("lg.events", 1): [Record(now_ms + 10)],  # the oldest first record
        TP("lg.events", 2): [],
        TP("lg-runs-changelog", 0): [Record(now_ms)],  # not the events topic: ignored
    }
    ages.fetching()  # nothing fetched before: no hand-over to observe
    assert count(metrics, "handed") == 0
    ages.fetched(fetch)
    assert count(metrics, "fetched") == 1
    fetched_age = total(metrics, "fetched")
    ages.fetching()  # the fetcher asks again: that fetch was handed over
    assert count(metrics, "handed") == 1
    assert total(metrics, "handed") >= fetched_age  # the same record, observed later
    ages.fetching()  # an idle fetch loop observes nothing more
    ages.fetched({TP("lg-runs-changelog", 0): [Record(now_ms)]})
    ages.fetching()
    assert count(metrics, "fetched") == 1 and count(metrics, "handed") == 1
