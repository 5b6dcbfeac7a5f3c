"""The fleet benchmark's pure parts: the TypeScript leg's report read back into the figures.

No broker and no node here: the report is written as ``fleet-agents.mjs`` writes it, with a
looping run's events encoded by the Python codec (byte for byte the TypeScript one's, see
test_cross_language_vectors), so the leaked-call count is the one the bench would print.
"""

from __future__ import annotations

import json
import math
from argparse import Namespace
from types import SimpleNamespace

import pytest

from bench.lab.fleet import leg_args, print_floor
from bench.lab.fleet_agents import (
    Measurements,
    WorkerWindow,
    is_looping,
    reference_refusal,
    summary,
)
from bench.lab.fleet_typescript import fill_measurements, node_command, read_report
from bench.lab.forwarders import echo_watermarks
from streams.core.events import Envelope, RunStarted, ToolCall, ToolResult
from streams.wire.avro import RunWatermarks, decode_control, encode_event


def looping_events(run_id: str, calls: int) -> list:
    """A looping run as the bench's agents publish it: one call, one result, repeated."""
    seq = iter(range(1, 2 * calls + 2))

    def env() -> Envelope:
        return Envelope(run_id, "fleet-agent", "fleet-gw-ts", next(seq), 1_700_000_000_000)

    events: list = [RunStarted(env())]
    for _ in range(calls):
        args = json.dumps({"command": "make test"})
        events.append(ToolCall(env(), "exec", args))
        result = json.dumps({"exit": 1, "out": "same failure"})
        events.append(ToolResult(env(), "exec", args, result))
    return events


def report(looping_runs: list[dict]) -> dict:
    return {
        "event": "report",
        "calls": 4,
        "timeouts": 1,
        "waitMs": [0.1, 0.2, 60.0, 3.0],
        "decisionMs": [12.0, 30.0],
        "watermarkMs": [5.0, 6.0, 7.0],
        "loopingRuns": looping_runs,
        "cpuSeconds": 1.5,
        "eventLoopDelayMs": {"p50": 10.0, "p99": 12.0, "max": 20.0},
        "stats": {"publishErrors": 0},
        "warnings": 0,
    }


def hex_run(events: list, refused_at: int | None, allowed: int) -> dict:
    encoded = [encode_event(event).hex() for event in events]
    return {"runId": "r", "refusedAt": refused_at, "allowed": allowed, "events": encoded}


def test_read_report_passes_the_marks_and_returns_the_report() -> None:
    marks: list[str] = []
    lines = ['{"event": "measuring"}\n', "noise\n", '{"event": "stopped"}\n']
    lines.append(json.dumps(report([])) + "\n")
    got = read_report(iter(lines), marks.append)
    assert marks == ["measuring", "stopped"]
    assert got["calls"] == 4


def test_read_report_without_a_report_raises() -> None:
    with pytest.raises(ValueError, match="no report"):
        read_report(iter(['{"event": "measuring"}\n']), lambda _mark: None)


def test_leaked_calls_are_counted_from_the_reported_events() -> None:
    reference = reference_refusal(looping_events("x", 20))
    assert reference is not None  # the core refuses one of 20 identical calls
    # A run the gateway refused 2 calls late, one refused in time, one the bench cut short
    # (a refused call is published too, with the refusal as its result).
    late = looping_events("late", reference + 2)
    in_time = looping_events("in-time", reference)
    short = looping_events("short", reference - 3)
    m = Measurements(measure_from=-math.inf)
    fill_measurements(
        m,
        report(
            [
                hex_run(late, reference + 2, reference + 1),
                hex_run(in_time, reference, reference - 1),
                hex_run(short, None, reference - 3),
            ]
        ),
    )
    assert sorted(m.leaked) == [0, 2]
    assert m.looping_runs == 2 and m.early == 0
    args = Namespace(
        broker="tansu", guarantee="at_least_once", agents=10, seconds=2.0, worker="loopguard"
    )
    # The worker's window as two scrapes would leave it: 10 events aged <= 5 ms, 2 <= 50 ms.
    window = WorkerWindow(pid=0, web_port=0)
    window.cpu = {"measuring": 3.0, "stopped": 3.5}
    window.ages = {
        "measuring": {0.005: 4.0, 0.05: 4.0, math.inf: 4.0},
        "stopped": {0.005: 14.0, 0.05: 16.0, math.inf: 16.0},
    }
    figures = summary("typescript", m, args, window, client_cpu_s=1.5)
    assert figures["worker_cpu_s"] == 0.5
    assert figures["event_age_p50_max_ms"] == 5.0 and figures["event_age_p99_max_ms"] == 50.0
    assert figures["leaked_max"] == 2 and figures["timeouts"] == 1
    assert figures["within_budget"] == 0.75 and figures["decisions"] == 2
    assert figures["events_decided"] == 3 and figures["client"] == "typescript"


def test_the_echo_leaves_no_leaked_calls_figure() -> None:
    """The echo refuses nothing, so its looping runs' calls are not leaks of a guard."""
    m = Measurements(measure_from=-math.inf)
    m.on_looping_run(looping_events("x", 20)[:-6], None, 17)  # the reference refused one
    assert m.leaked  # what the loopguard worker's leg would count
    args = Namespace(
        broker="tansu", guarantee="at_least_once", agents=1, seconds=1.0, worker="echo"
    )
    window = WorkerWindow(pid=0, web_port=None)
    window.cpu = {"measuring": 1.0, "stopped": 1.25}
    figures = summary("python", m, args, window, client_cpu_s=0.5)
    assert figures["worker"] == "echo" and figures["worker_cpu_s"] == 0.25
    assert figures["leaked_p99"] is None and figures["leaked_max"] is None
    assert figures["event_age_p50_max_ms"] is None  # the echo has no /metrics


def test_the_echo_answers_each_run_at_its_highest_seq_as_the_worker_packs_it() -> None:
    a, b = looping_events("run-a", 2), looping_events("run-b", 1)
    values = [encode_event(e) for e in (a[0], b[0], a[1], a[2], b[1])]  # runs interleaved
    (record,) = echo_watermarks(values)
    message = decode_control(record)
    assert isinstance(message, RunWatermarks)
    assert {m.run_id: m.seq for m in message.marks} == {"run-a": 3, "run-b": 2}
    assert echo_watermarks([]) == []


def test_node_command_passes_the_fleet_and_no_per_partition_cap() -> None:
    args = SimpleNamespace(
        agents=50,
        seconds=15.0,
        warmup=5.0,
        think_median=1.5,
        think_sigma=0.8,
        back_to_back=0.2,
        looping=0.05,
        run_calls=30,
        budget_ms=50.0,
        seed=1,
    )
    cmd = node_command("127.0.0.1:9092", 5, args)
    flags = dict(zip(cmd[2::2], cmd[3::2], strict=True))
    assert flags["--agents"] == "50" and flags["--think-median"] == "1.5"
    assert flags["--back-to-back"] == "0.2" and flags["--budget-ms"] == "50"
    assert flags["--fetch-max-wait-ms"] == "5" and "--max-events-per-partition" not in flags


def test_the_looping_share_is_exact_and_spread() -> None:
    assert [i for i in range(60) if is_looping(i, 0.05)] == [19, 39, 59]
    assert sum(is_looping(i, 0.05) for i in range(1000)) == 50
    assert not any(is_looping(i, 0.0) for i in range(100))
    assert all(is_looping(i, 1.0) for i in range(100))


def test_the_echo_legs_run_outside_transactions_and_print_beside_the_worker(capsys) -> None:
    args = Namespace(
        worker="loopguard,echo", guarantee="exactly_once", clients=["python"], budget_ms=50.0
    )
    assert leg_args(args, "echo").guarantee == "at_least_once"
    assert leg_args(args, "loopguard").guarantee == "exactly_once"
    assert args.guarantee == "exactly_once"  # each leg has its own copy
    legs = [
        {"worker": "loopguard", "client": "python", "within_budget": 0.8, "decided_p50_ms": 120.0},
        {"worker": "echo", "client": "python", "within_budget": 0.978, "decided_p50_ms": 33.6},
    ]
    print_floor(legs, args)
    line = capsys.readouterr().out
    assert "loopguard answered 80.00%" in line and "the echo 97.80%" in line
    assert "120.0 against 33.6 ms" in line
    print_floor(legs[:1], args)  # no echo leg: nothing to set beside it
    assert capsys.readouterr().out == ""
    faust = {
        "worker": "faustecho",
        "client": "python",
        "within_budget": 0.9,
        "decided_p50_ms": 60.0,
    }
    assert leg_args(args, "faustecho").guarantee == "at_least_once"
    print_floor([*legs, faust], args)
    assert (
        "the echo as a Faust agent: 90.00%, events decided p50 60.0 ms" in capsys.readouterr().out
    )
    print_floor([legs[0], faust], args)  # the Faust echo alone still sets loopguard beside it
    out = capsys.readouterr().out
    assert "loopguard answered 80.00% of waits within 50 ms" in out and "Faust agent: 90.00%" in out
