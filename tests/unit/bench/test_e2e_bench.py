"""e2e_bench's figures: latencies' percentiles, and loopguard's answer beside the echo's
(``--worker loopguard,echo``) when both legs ran."""

from __future__ import annotations

import argparse

from bench.lab.e2e import percentiles
from bench.lab.e2e_report import print_floor

ARGS = argparse.Namespace(broker="kafka", rate=200)


def leg(worker: str, p50: float, p99: float) -> dict:
    return {"worker": worker, "watermark_p50_ms": p50, "watermark_p99_ms": p99}


def test_percentiles_of_sorted_latencies() -> None:
    figures = percentiles([float(ms) for ms in range(1, 201)])
    assert figures == {"p50": 100.5, "p90": 180.0, "p99": 198.0, "max": 200.0}


def test_loopguard_beside_the_echo_when_both_ran(capsys) -> None:
    print_floor(ARGS, [leg("loopguard", 16.7, 47.4), leg("echo", 3.0, 11.5)])
    line = capsys.readouterr().out
    assert "p99 loopguard 47.4 ms, the echo 11.5 ms (4.12x)" in line
    assert "p50 16.7 against 3.0 ms (kafka, 200 events/s" in line


def test_one_leg_alone_has_no_floor_line(capsys) -> None:
    print_floor(ARGS, [leg("loopguard", 16.7, 47.4)])
    print_floor(ARGS, [leg("echo", 3.0, 11.5)])
    assert capsys.readouterr().out == ""
