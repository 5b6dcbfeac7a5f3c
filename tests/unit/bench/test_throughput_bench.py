"""The arithmetic of bench/throughput_bench.py, without a broker: contender names and their
partitions check, each worker's events and CPU (an audit process's too), N workers / one and
the prediction from CPU."""

from __future__ import annotations

import pytest

from bench.lab.throughput_report import (
    check_contenders,
    contender_workers,
    label,
    per_worker,
    prediction,
    scaling,
    worker_lines,
)


def test_contender_names_give_their_worker_counts() -> None:
    assert contender_workers("aiokafka") == 1
    assert contender_workers("faust") == 1
    assert contender_workers("faustconsume") == 1
    assert [contender_workers(f"loopguardx{n}") for n in (1, 2, 4, 8, 16)] == [1, 2, 4, 8, 16]
    for bad in ("loopguardx0", "loopguard", "loopguardx", "loopguardxtwo", "kafka"):
        with pytest.raises(ValueError, match="unknown contender"):
            contender_workers(bad)


def test_n_workers_need_n_partitions() -> None:
    assert check_contenders(["aiokafka", "loopguardx1", "loopguardx4"], 4, 2) is None
    error = check_contenders(["aiokafka", "loopguardx8"], 4, 0)
    assert error is not None and "loopguardx8 needs at least 8 partitions" in error
    assert "\n" not in error
    error = check_contenders(["loopguardx1"], 1, 2)
    assert error is not None and "latency phase" in error
    assert check_contenders(["loopguardx1"], 1, 0) is None
    assert check_contenders([], 4, 0) == "--only names no contender"


def test_each_worker_is_charged_the_events_of_its_partitions() -> None:
    events = {0: 1000, 1: 1000, 2: 500, 3: 1500}
    workers = per_worker([[1, 0], [2, 3]], events, [0.5, 1.5], elapsed=2.0)
    assert [w["partitions"] for w in workers] == [[0, 1], [2, 3]]
    assert [w["events"] for w in workers] == [2000, 2000]
    assert [w["cpu_us_per_event"] for w in workers] == [250.0, 750.0]
    assert [w["cpu_share"] for w in workers] == [0.25, 0.75]
    assert [w["core_busy"] for w in workers] == [0.25, 0.75]
    idle = per_worker([[0], []], {0: 10}, [0.01, 0.0], elapsed=1.0)[1]
    assert idle["events"] == 0 and idle["cpu_us_per_event"] is None


def test_prediction_is_n_cores_of_one_workers_cpu_against_the_measured_one() -> None:
    # 250 us per event: 4,000 events/s on a whole core; 4 of them 16,000; x1 measured 4,000.
    predicted = prediction(4, 250.0, 4000)
    assert predicted["events_per_s_per_core"] == 4000
    assert predicted["predicted_events_per_s"] == 16000
    assert predicted["predicted_vs_x1"] == 4.0
    assert prediction(4, 250.0, None)["predicted_vs_x1"] is None


def test_scaling_measures_against_one_worker_and_predicts_where_cores_are_short() -> None:
    results = {
        "aiokafka": {"events_per_s": 30000, "cpu_us_per_event": 30.0},
        "loopguardx1": {
            "events_per_s": 2000,
            "cpu_us_per_event": 400.0,
            "cpu_s": 4.0,
            "seconds": 5.0,
        },
        "loopguardx4": {
            "events_per_s": 3000,
            "cpu_us_per_event": 500.0,
            "per_worker": [{"cpu_us_per_event": c} for c in (450.0, 500.0, 500.0, 625.0)],
        },
    }
    four = scaling(results, cores=2)["loopguardx4"]
    assert four["measured_vs_x1"] == 1.5
    assert four["events_per_s_per_worker"] == 750
    assert four["predicted"]["predicted_events_per_s"] == 8000  # 4 x 1e6 / 500
    assert four["predicted"]["predicted_vs_x1"] == 4.0
    assert four["predicted"]["printed"] is True
    assert four["predicted"]["x1_core_busy"] == 0.8  # 4 s CPU in 5 s: it waited a fifth
    assert four["predicted_costliest"]["predicted_vs_x1"] == 3.2  # 4 x 1e6 / 625 / 2000
    assert scaling(results, cores=16)["loopguardx4"]["predicted"]["printed"] is False
    assert set(scaling(results, cores=2)) == {"loopguardx4"}  # baselines and x1 not scaled
    alone = scaling({"loopguardx2": {"events_per_s": 900, "cpu_us_per_event": None}}, 2)
    assert alone["loopguardx2"] == {"workers": 2, "measured_vs_x1": None, "predicted": None}


def test_split_roles_name_guards_and_the_audit_process() -> None:
    assert label("loopguardx2") == "loopguard, 2 workers"
    assert label("loopguardx1", "split") == "loopguard, 1 guard + audit"
    assert label("loopguardx4", "split") == "loopguard, 4 guards + audit"
    assert label("aiokafka", "split") == "bare aiokafka loop"


def test_the_audit_process_is_charged_per_event_of_the_whole_window() -> None:
    events = {0: 1000, 1: 1000, 2: 500, 3: 1500}
    workers = per_worker(
        [[0, 1], [2, 3], []],
        events,
        [0.5, 1.5, 0.4],
        elapsed=2.0,
        roles=["guard", "guard", "audit"],
    )
    assert [w["role"] for w in workers] == ["guard", "guard", "audit"]
    assert [w["events"] for w in workers] == [2000, 2000, 4000]
    assert [w["cpu_us_per_event"] for w in workers] == [250.0, 750.0, 100.0]
    assert [w["cpu_share"] for w in workers] == [0.208, 0.625, 0.167]
    assert per_worker([[0]], {0: 10}, [0.01], elapsed=1.0)[0]["role"] == "all"
    guard, _, audit = worker_lines(workers)
    assert guard.startswith("worker 0, role guard (partitions 0,1): 2,000 events, 0.50 s CPU")
    assert audit.startswith("audit process (no events partition): 0.40 s CPU, 100 us CPU/event")
    assert "of all 4,000 events" in audit


def test_the_costliest_worker_prediction_leaves_the_audit_process_out() -> None:
    results = {
        "loopguardx1": {"events_per_s": 2000, "cpu_us_per_event": 400.0},
        "loopguardx2": {
            "events_per_s": 3000,
            "cpu_us_per_event": 500.0,
            "per_worker": [
                {"role": "guard", "cpu_us_per_event": 800.0},
                {"role": "guard", "cpu_us_per_event": 1000.0},
                {"role": "audit", "cpu_us_per_event": 50.0},
            ],
        },
    }
    two = scaling(results, cores=1)["loopguardx2"]
    assert two["workers"] == 2
    assert two["predicted_costliest"]["cpu_us_per_event"] == 1000.0
