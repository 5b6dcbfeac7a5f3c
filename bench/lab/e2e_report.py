"""What :mod:`bench.lab.e2e` prints: each leg's figures, and loopguard's answer beside the
echo's when both ran."""

from __future__ import annotations

import argparse

from bench.lab.harness import AGE_METRIC, ROUND_METRIC, stage_age_lines
from streams.core.engine import core_build


def print_leg(args: argparse.Namespace, leg: dict) -> None:
    """One leg's figures, as the bench has always printed them for loopguard."""
    if leg["worker"] == "echo":
        who, workers = "echo", "the bare aiokafka echo, no decisions"
    else:
        who = "guard worker" if args.roles == "split" else "worker"
        workers = "1 guard worker + 1 audit process" if args.roles == "split" else "1 worker"
    title = "the floor" if leg["worker"] == "echo" else "loopguard"
    print(
        f"{title}: end-to-end benchmark ({workers}, roles {args.roles}, broker: "
        f"{args.broker}, loopback; build: {core_build()})"
    )
    events, elapsed = leg["events"], leg["elapsed_s"]
    print(f"  throughput: {events} events in {elapsed:.2f}s = {leg['e2e_events_per_s']:,} events/s")
    answered = "watermark" if leg["worker"] == "echo" else "decision"
    until = "answered" if leg["worker"] == "echo" else "decided"
    print(
        f"              (producer alone took {leg['produced_in_s']:.2f}s; every {answered} in at "
        f"{elapsed:.2f}s, everything committed at {leg['committed_in_s']:.2f}s = "
        f"{leg['committed_events_per_s']:,} events/s)"
    )
    cpu = leg["worker_cpu_us_per_event"]
    print(
        f"  {who} CPU per event: {cpu:.0f} µs until committed, "
        f"{leg['decided_cpu_us_per_event']:.0f} µs until {until} (= {1e6 / cpu:,.0f} "
        f"events/s if the {who} had a core to itself)"
    )
    if args.roles == "split" and leg["worker"] != "echo":
        print(
            f"  all processes (guard + audit) CPU per event: "
            f"{leg['all_processes_cpu_us_per_event']:.0f} µs until the guard committed (the "
            "audit's work after that is not counted)"
        )
    print(f"  bare core on the same events: {leg['core_events_per_s']:,} events/s")
    print(f"  end-to-end / core ratio: {leg['ratio']:.3f}")
    if leg["latency_p50_ms"] is not None:
        print(
            f"  decision latency at {args.rate} events/s offered: p50 {leg['latency_p50_ms']:.1f} "
            f"ms, p99 {leg['latency_p99_ms']:.1f} ms over {leg['decisions']} decisions "
            f"({leg['missing']} missing); p90 {leg['latency_p90_ms']:.1f} ms"
        )
    print(
        f"  the run's watermark at its last event: p50 {leg['watermark_p50_ms']:.1f} ms, p99 "
        f"{leg['watermark_p99_ms']:.1f} ms over {leg['watermarks']} runs"
    )
    slowest = leg["slowest"]
    print("  slowest: " + ", ".join(f"{ms:.1f} ms at {at:.1f} s" for ms, at in reversed(slowest)))
    if leg["warmup_p50_ms"] is not None:
        print(
            f"  warm-up before it ({args.warmup:g} s at the same rate, not counted above): "
            f"p50 {leg['warmup_p50_ms']:.1f} ms, max {leg['warmup_latency_max_ms']:.1f} ms"
        )
    if leg["events_aged"]:
        print(
            f"  events' age when the worker took them in (its {AGE_METRIC} histogram, latency "
            f"phase, {leg['events_aged']} events): p50 <= {_ms(leg['event_age_p50_max_ms'])}, "
            f"p99 <= {_ms(leg['event_age_p99_max_ms'])} (bucket bounds): "
            "the broker path before the worker"
        )
    for line in stage_age_lines(leg["stage_ages"]):
        print(line)
    for phase, key in (
        ("burst", "settle_rounds_burst"),
        ("latency phase", "settle_rounds_latency"),
    ):
        figures = leg[key]
        if figures["rounds"]:
            print(
                f"  settling rounds (its {ROUND_METRIC}, exactly once), {phase}: "
                f"{figures['rounds']}, p50 <= {_ms(figures['p50_max_ms'])}, "
                f"p99 <= {_ms(figures['p99_max_ms'])} (bucket bounds): how far committed "
                "state trailed the decisions"
            )


def print_floor(args: argparse.Namespace, legs: list[dict]) -> None:
    """loopguard's latency to the run's last watermark beside the echo's, when both ran."""
    by_worker = {leg["worker"]: leg for leg in legs}
    if "loopguard" not in by_worker or "echo" not in by_worker:
        return
    guard, echo = by_worker["loopguard"], by_worker["echo"]
    print(
        f"against the floor: the run's watermark at its last event, p99 loopguard "
        f"{guard['watermark_p99_ms']:.1f} ms, the echo {echo['watermark_p99_ms']:.1f} ms "
        f"({guard['watermark_p99_ms'] / echo['watermark_p99_ms']:.2f}x); p50 "
        f"{guard['watermark_p50_ms']:.1f} against {echo['watermark_p50_ms']:.1f} ms "
        f"({args.broker}, {args.rate} events/s, each leg on a fresh broker)"
    )


def _ms(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms:g} ms"
