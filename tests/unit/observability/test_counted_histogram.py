"""CountedHistogram: a batch's observations in one call, exposed as prometheus_client's own
Histogram exposes the same observations (its _created sample aside)."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from streams.observability.counted_histogram import CountedHistogram

BUCKETS = (0.001, 0.01, 0.1, 1.0)


def exposed(registry: CollectorRegistry) -> list[str]:
    """The exposition's lines but _created and _sum (a sum's last digit follows the order
    the values were added in)."""
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line and "_sum" not in line]


def test_the_same_observations_are_exposed_as_a_histogram_exposes_them() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counted = CountedHistogram("lg_seconds", "What it measures.", BUCKETS, ours)
    reference = Histogram("lg_seconds", "What it measures.", buckets=BUCKETS, registry=theirs)
    values = [0.0, 0.001, 0.0011, 0.05, 0.1, 0.7, 3.0, 42.0]
    counted.observe_each(iter(values))
    counted.observe(0.005, 3)  # three events of one batch, one call
    counted.observe(0.5, 0)  # none
    for value in [*values, 0.005, 0.005, 0.005]:
        reference.observe(value)
    assert exposed(ours) == exposed(theirs)
    assert ours.get_sample_value("lg_seconds_count") == 11
    assert ours.get_sample_value("lg_seconds_bucket", {"le": "0.001"}) == 2  # le is inclusive
    assert ours.get_sample_value("lg_seconds_bucket", {"le": "+Inf"}) == 11
    assert math.isclose(ours.get_sample_value("lg_seconds_sum"), sum(values) + 0.015)
    assert math.isclose(
        ours.get_sample_value("lg_seconds_sum"), theirs.get_sample_value("lg_seconds_sum")
    )
