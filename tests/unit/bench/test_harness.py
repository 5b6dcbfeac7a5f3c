"""The benchmarks' reading of a worker's histogram: the bucket holding a quantile of what was
observed between two scrapes (e2e_bench's event-age line)."""

from __future__ import annotations

import math

from bench.lab.harness import (
    bucket_quantile,
    event_age_figures,
    labelled_buckets,
    round_figures,
    stage_age_figures,
    stage_age_lines,
)

BEFORE = {0.01: 90.0, 0.03: 95.0, 0.05: 100.0, math.inf: 100.0}


def test_the_quantile_of_what_came_between_two_scrapes() -> None:
    # 100 more observations: 60 up to 10 ms, 39 more up to 30 ms, 1 over 50 ms
    after = {0.01: 150.0, 0.03: 194.0, 0.05: 199.0, math.inf: 200.0}
    assert bucket_quantile(BEFORE, after, 0.5) == (0.01, 100)
    assert bucket_quantile(BEFORE, after, 0.99) == (0.03, 100)
    assert bucket_quantile(BEFORE, after, 1.0) == (math.inf, 100)


def test_nothing_observed_has_no_quantile() -> None:
    assert bucket_quantile(BEFORE, dict(BEFORE), 0.99) == (None, 0)
    assert bucket_quantile({}, {}, 0.5) == (None, 0)


def test_event_age_figures_are_the_quantiles_in_ms() -> None:
    after = {0.01: 150.0, 0.03: 194.0, 0.05: 199.0, math.inf: 200.0}
    assert event_age_figures(BEFORE, after) == {
        "event_age_p50_max_ms": 10.0,
        "event_age_p99_max_ms": 30.0,
        "events_aged": 100,
    }
    nothing = {"event_age_p50_max_ms": None, "event_age_p99_max_ms": None, "events_aged": 0}
    assert event_age_figures(BEFORE, dict(BEFORE)) == nothing


def test_round_figures_count_the_rounds_between_two_scrapes() -> None:
    after = {0.01: 150.0, 0.03: 194.0, 0.05: 199.0, math.inf: 200.0}
    assert round_figures(BEFORE, after) == {"rounds": 100, "p50_max_ms": 10.0, "p99_max_ms": 30.0}
    assert round_figures(BEFORE, dict(BEFORE)) == {
        "rounds": 0,
        "p50_max_ms": None,
        "p99_max_ms": None,
    }


def test_stage_ages_are_read_per_stage_from_a_metrics_text_and_printed_in_order() -> None:
    text = "\n".join(
        [
            "# TYPE loopguard_event_stage_age_seconds histogram",
            *(
                f'loopguard_event_stage_age_seconds_bucket{{le="{le}",stage="{stage}"}} {n}'
                for stage, counts in (("taken", (1, 3, 4)), ("fetched", (4, 4, 4)))
                for le, n in zip(("0.005", "0.05", "+Inf"), counts, strict=True)
            ),
        ]
    )
    after = labelled_buckets(text + "\n", "loopguard_event_stage_age_seconds", "stage")
    assert after["taken"] == {0.005: 1.0, 0.05: 3.0, math.inf: 4.0}
    figures = stage_age_figures({}, after)
    assert list(figures) == ["fetched", "taken"]  # the order the stages happen in
    assert figures["taken"] == {"p50_max_ms": 50.0, "p99_max_ms": math.inf, "seen": 4}
    assert figures["fetched"]["p99_max_ms"] == 5.0
    lines = stage_age_lines(figures)
    assert [line.split()[0] for line in lines[2:]] == ["fetched", "taken"]
    assert stage_age_lines({}) == []  # a worker without the metric prints nothing
