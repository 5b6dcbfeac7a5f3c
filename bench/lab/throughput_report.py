"""The arithmetic and the printout of ``bench/throughput_bench.py``, apart from the timing.

Apart from reading the load average, pure (no broker, no process), so the ratios and the
prediction from CPU are tested without running a benchmark: tests/unit/test_throughput_bench.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

from bench.lab.harness import load_average, mb

BASELINES = {
    "aiokafka": "bare aiokafka loop",
    "faust": "bare Faust forwarding agent",
    "faustconsume": "bare Faust agent, consume only",
}
LOOPGUARD = "loopguardx"
AUDIT = "audit"  # the role of the process that owns no events partition


def contender_workers(name: str) -> int:
    """Processes a contender runs: 1 for a baseline, N for ``loopguardx<N>``; ValueError
    for any other name."""
    if name in BASELINES:
        return 1
    count = name[len(LOOPGUARD) :] if name.startswith(LOOPGUARD) else ""
    if not count.isdigit() or int(count) < 1:
        raise ValueError(
            f"unknown contender {name!r}: expected aiokafka, faust, faustconsume or "
            "loopguardx<N> (N >= 1)"
        )
    return int(count)


def check_contenders(names: Sequence[str], partitions: int, latency_workers: int) -> str | None:
    """One line saying what is wrong with ``--only`` / ``--partitions``, or None: every worker
    of a group needs a partition of its own, or it idles and the figure is not N workers'."""
    if not names:
        return "--only names no contender"
    if partitions < 1:
        return f"--partitions must be at least 1, not {partitions}"
    for name in names:
        try:
            workers = contender_workers(name)
        except ValueError as error:
            return str(error)
        if workers > partitions:
            return (
                f"{name} needs at least {workers} partitions (one per worker); "
                f"--partitions is {partitions}"
            )
    if latency_workers > partitions:
        return (
            f"the latency phase runs {latency_workers} workers and needs at least "
            f"{latency_workers} partitions; pass --partitions {latency_workers} or "
            "--latency-seconds 0"
        )
    return None


def label(name: str, roles: str = "all") -> str:
    """The table's name of a contender: ``loopguard, 2 workers``; with ``--roles split``
    ``loopguard, 2 guards + audit``."""
    if name in BASELINES:
        return BASELINES[name]
    workers = contender_workers(name)
    if roles == "split":
        return f"loopguard, {workers} guard{'s' if workers > 1 else ''} + audit"
    return f"loopguard, {workers} worker{'s' if workers > 1 else ''}"


def per_worker(
    owned: Sequence[Iterable[int]],
    events_by_partition: dict[int, int],
    cpu_s: Sequence[float],
    elapsed: float,
    roles: Sequence[str] | None = None,
) -> list[dict]:
    """Each process's share of a timed window: its role, the events of the partitions it
    owned, its CPU seconds, CPU per event (what one worker costs, whatever the others do), its
    share of the contender's CPU and how busy it kept a core (CPU / wall time). An audit
    process owns no events partition: its events are every event of the window (what its
    CPU per event is divided by)."""
    total_cpu = sum(cpu_s)
    figures = []
    roles = roles or ["all"] * len(cpu_s)
    for partitions, cpu, role in zip(owned, cpu_s, roles, strict=True):
        partitions = sorted(partitions)
        counted = events_by_partition if role == AUDIT else partitions
        events = sum(events_by_partition.get(p, 0) for p in counted)
        figures.append(
            {
                "role": role,
                "partitions": partitions,
                "events": events,
                "cpu_s": round(cpu, 3),
                "cpu_us_per_event": round(cpu / events * 1e6, 1) if events > 0 else None,
                "cpu_share": round(cpu / total_cpu, 3) if total_cpu > 0 else None,
                "core_busy": round(cpu / elapsed, 3) if elapsed > 0 else None,
            }
        )
    return figures


def worker_lines(workers: Sequence[dict]) -> list[str]:
    """One line per process of :func:`per_worker`, naming its role."""
    lines = []
    for i, w in enumerate(workers):
        cpu = f"{w['cpu_s']:.2f} s CPU, {_us(w['cpu_us_per_event'])} us CPU/event"
        if w.get("role") == AUDIT:
            head = f"audit process (no events partition): {cpu} of all {w['events']:,} events"
        else:
            parts = ",".join(map(str, w["partitions"]))
            head = (
                f"worker {i}, role {w.get('role', 'all')} (partitions {parts}): "
                f"{w['events']:,} events, {cpu}"
            )
        lines.append(
            f"{head}, {_pct(w['cpu_share'])} of the contender's CPU, "
            f"kept {_pct(w['core_busy'])} of a core busy"
        )
    return lines


def share(value: float | None, base: float | None) -> float | None:
    """value / base, None where either is missing or base is 0."""
    if not value or not base:
        return None
    return value / base


def prediction(workers: int, cpu_us_per_event: float, x1_events_per_s: float | None) -> dict:
    """What N workers would reach with a core each, from CPU alone (not a measurement): one
    worker on a whole core does 1e6 / (its CPU us per event) events/s; N of them N times that;
    as a share of the one worker measured in the same run where it ran."""
    per_core = 1e6 / cpu_us_per_event
    predicted = per_core * workers
    ratio = share(predicted, x1_events_per_s)
    return {
        "workers": workers,
        "cpu_us_per_event": cpu_us_per_event,
        "events_per_s_per_core": round(per_core),
        "predicted_events_per_s": round(predicted),
        "predicted_vs_x1": round(ratio, 2) if ratio is not None else None,
    }


def scaling(results: dict[str, dict], cores: int) -> dict[str, dict]:
    """For every loopguard contender of more than one worker: N workers / one (measured, where
    both ran) and the prediction from CPU (from all its workers' CPU per event and from the
    costliest worker's), flagged ``printed`` on a machine with fewer cores than N. The one
    worker's core busy share rides along: well under 1, it waited rather than computed, and a
    prediction from CPU overstates what N workers add."""
    x1 = results.get(f"{LOOPGUARD}1", {})
    one = x1.get("events_per_s")
    one_busy = share(x1.get("cpu_s"), x1.get("seconds"))
    out: dict[str, dict] = {}
    for name, r in results.items():
        if name in BASELINES or (workers := contender_workers(name)) < 2:
            continue
        entry: dict = {"workers": workers, "measured_vs_x1": None, "predicted": None}
        ratio = share(r.get("events_per_s"), one)
        if ratio is not None:
            entry["measured_vs_x1"] = round(ratio, 2)
            entry["events_per_s_per_worker"] = round(r["events_per_s"] / workers)
        if r.get("cpu_us_per_event"):
            entry["predicted"] = prediction(workers, r["cpu_us_per_event"], one)
            costs = [
                w["cpu_us_per_event"] for w in r.get("per_worker") or [] if w.get("role") != AUDIT
            ]
            if costs and all(costs):
                entry["predicted_costliest"] = prediction(workers, max(costs), one)
            entry["predicted"]["printed"] = cores < workers
            entry["predicted"]["x1_core_busy"] = round(one_busy, 3) if one_busy else None
        out[name] = entry
    return out


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def print_report(
    args, guarantee: str, results: dict, latency: dict | None, memory: dict | None, broker_rss
) -> None:
    """The table, per-worker CPU, scaling and the other figures; then ``--json``'s line."""
    cores = os.cpu_count() or 1
    print()
    print(
        f"throughput side by side: broker {args.broker}, {args.partitions} partitions, "
        f"{args.runs:,} runs interleaved, pre-produced backlog, {cores} cores"
    )
    print(
        "  roles: "
        + (
            "split: each loopguard contender's N workers LOOPGUARD_ROLE=guard plus one "
            "LOOPGUARD_ROLE=audit process (its CPU counted in all its processes')"
            if args.roles == "split"
            else "all: each loopguard worker runs every role (guard and audit)"
        )
    )
    base = results.get("aiokafka", {}).get("events_per_s")
    print(
        "  producer batches: 16 KB for both baselines; loopguard's from its broker profile; "
        f"baselines at least once, loopguard {guarantee.replace('_', ' ')}"
    )
    print(
        f"  {'contender':<28}{'events/s':>10}{'vs aiokafka':>13}{'seconds':>9}"
        f"{'us CPU/event':>14}  notes"
    )
    for name, r in results.items():
        vs = share(r["events_per_s"], base)
        r["vs_aiokafka"] = round(vs, 4) if vs is not None else None
        notes = []
        if "decisions_expected" in r:
            notes.append(
                f"decisions: {r['decisions_expected']:,} expected, "
                f"{r['decisions_missing']:,} missing, {r['decisions_unexpected']:,} unexpected"
            )
        if r["timed_with_start_up"]:
            notes.append("one commit held every event: timed from the process start")
        if not r["drained"]:
            notes.append(f"rate over {r['timed_events']:,} events (drain timeout)")
        if r.get("cpu_us_per_event"):
            notes.append(f"{1e6 / r['cpu_us_per_event']:,.0f} events/s per busy core")
        if name not in BASELINES and r.get("rebalances", 0) > contender_workers(name):
            notes.append(f"{r['rebalances']} assignments in all (timed after the last)")
        print(
            f"  {label(name, args.roles):<28}{r['events_per_s']:>10,}{_pct(r['vs_aiokafka']):>13}"
            f"{r['seconds']:>9.1f}{_us(r.get('cpu_us_per_event')):>14}  " + "; ".join(notes)
        )
        print(
            f"      load average (1/5/15 min) {r['load_start']} at its start, "
            f"{r['load_end']} at its end; {r['cpu_count']} cores"
        )
        if r.get("broker_cpu_us_per_event") is not None:
            print(
                f"      broker: {_us(r['broker_cpu_us_per_event']).strip()} us CPU per event; "
                f"it and the contender kept {_pct(r.get('machine_busy'))} of the "
                f"{r['cpu_count']} cores busy"
            )
        if name not in BASELINES:
            for line in worker_lines(r.get("per_worker") or []):
                print(f"      {line}")
    if results.get("aiokafka", {}).get("timed_with_start_up"):
        print(
            "  (the aiokafka loop drained its backlog within one commit, so it was timed from "
            "its process start: its events/s is understated and the shares against it overstated; "
            "give more --events)"
        )
    scaled = scaling(results, cores)
    for s in scaled.values():
        n = s["workers"]
        if s["measured_vs_x1"] is not None:
            print(
                f"  {n} workers / one, measured: {s['measured_vs_x1']:.2f}x "
                f"({s['events_per_s_per_worker']:,} events/s per worker)"
            )
        p = s["predicted"]
        if p and p["printed"]:
            versus = (
                f" = {p['predicted_vs_x1']:.2f}x the 1 worker measured"
                if p["predicted_vs_x1"] is not None
                else ""
            )
            costliest = s.get("predicted_costliest", {}).get("predicted_vs_x1")
            print(
                f"  {n} workers PREDICTED FROM CPU, not measured ({cores} cores < {n} "
                f"workers): {n} x 1e6 / {p['cpu_us_per_event']:,.0f} us per event = "
                f"{p['predicted_events_per_s']:,} events/s{versus}"
                + (f" ({costliest:.2f}x from its costliest worker)" if costliest else "")
            )
            busy = p["x1_core_busy"]
            if busy is not None and busy < 0.9:
                print(
                    f"      but the 1 worker kept only {busy:.0%} of a core busy: it waited "
                    "(commits, fetches), which CPU does not predict; the prediction overstates"
                )
    print_other(args, results, latency, memory, broker_rss)
    if args.json:
        print(
            json.dumps(
                {
                    "broker": args.broker,
                    "guarantee": guarantee,
                    "partitions": args.partitions,
                    "runs": args.runs,
                    "roles": args.roles,
                    "cpu_count": cores,
                    "results": results,
                    "scaling": scaled,
                    "latency": latency,
                    "memory": memory,
                    "load_start": args.load_at_start,
                    "load_end": load_average(),
                }
            )
        )


def print_other(args, results: dict, latency: dict | None, memory: dict | None, broker_rss):
    """Changelog, memory, latency and broker figures (one worker's and the latency phase's)."""
    one = results.get(f"{LOOPGUARD}1")
    if one and "changelog_bytes_per_event" in one:
        print(
            f"  changelog written (1 worker): {one['changelog_bytes_per_event']:,.0f} bytes/"
            f"event, {one['changelog_records_per_event']:.2f} records/event"
        )
    if one and one.get("rss_idle_kb"):
        grown = one["rss_peak_kb"][0] - one["rss_idle_kb"][0]
        who = "1 worker's guard" if args.roles == "split" else "1 worker"
        print(
            f"  worker RSS ({who}): idle {mb(one['rss_idle_kb'][0])}, peak "
            f"{mb(one['rss_peak_kb'][0])}: {grown * 1024 / args.runs:,.0f} bytes per run "
            f"held ({args.runs:,} runs)"
        )
    if memory:
        print(
            f"  memory per active run, tracemalloc ({memory['runs']:,} RunStates, 30-call "
            f"histories): {memory['bytes_per_run']:,.0f} bytes"
        )
    if latency:
        caught = latency["catch_up_s"]
        who = "2 guards + audit" if args.roles == "split" else "2 workers"
        print(
            f"  decision latency, {who}, {latency['offered_per_s']:,.0f} events/s offered "
            f"for {latency['seconds']:.0f}s ({args.runs:,} runs interleaved + timed "
            f"compaction loops): p50 {latency['p50_ms']:,.1f} ms, p99 "
            f"{latency['p99_ms']:,.1f} ms over {latency['samples']:,} decisions "
            f"({latency['missing']} missing); "
            + (
                f"caught up {caught:.1f}s after the last event"
                if caught is not None
                else f"NOT caught up {args.drain_timeout:.0f}s after the last event"
            )
        )
    print(f"  broker RSS at the end: {' + '.join(mb(v) for v in broker_rss)}")
    print(
        f"  load average at the end (1/5/15 min): {load_average()}; "
        f"at the start: {args.load_at_start}"
    )
