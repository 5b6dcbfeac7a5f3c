"""The TypeScript leg of ``bench/fleet_bench.py``: the fleet in one Node process, read back.

``clients/typescript/bench/fleet-agents.mjs`` runs the same simulated agents through the real
TypeScript ``GatewayClient`` (the built ``dist/``) and prints, one JSON object a line, when its
warmup ends, when its measured time is over, and a report of raw samples. This module starts
it, samples the worker's CPU at those two marks, and feeds the report into the Python leg's
``Measurements`` so that both legs' figures are computed by the same code. Leaked calls: the
report holds each looping run's events as the client encoded them (hex single-object
messages); they are decoded here and replayed through the in-process core, as the Python leg
replays its own runs' events.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from bench.lab.brokers import gateway_fetch_wait_ms
from bench.lab.fleet_agents import Measurements
from streams.wire.avro import decode_event

TS_DIR = Path(__file__).resolve().parents[2] / "clients" / "typescript"
FLEET_SCRIPT = TS_DIR / "bench" / "fleet-agents.mjs"  # imports ../dist/index.js


def ensure_ts_build() -> None:
    """``npm ci`` when node_modules is missing, ``npm run build`` when ``dist/`` is missing or
    older than ``src/``; a one-line exit when node or npm is not on PATH."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise SystemExit("the TypeScript leg needs node (>= 20) and npm on PATH")
    if not (TS_DIR / "node_modules").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=TS_DIR, check=True)
    built = TS_DIR / "dist" / "index.js"
    sources = list((TS_DIR / "src").glob("*.ts"))
    if not built.exists() or any(s.stat().st_mtime > built.stat().st_mtime for s in sources):
        subprocess.run([npm, "run", "--silent", "build"], cwd=TS_DIR, check=True)


def node_command(bootstrap: str, fetch_wait_ms: int, args: Any) -> list[str]:
    """The node command line for the fleet ``args`` of fleet_bench (an argparse namespace)."""
    cmd = ["node", str(FLEET_SCRIPT), "--brokers", bootstrap, "--prefix", "loopguard"]
    for flag in (
        "agents",
        "seconds",
        "warmup",
        "think_median",
        "think_sigma",
        "back_to_back",
        "looping",
        "run_calls",
        "budget_ms",
        "seed",
    ):
        cmd += [f"--{flag.replace('_', '-')}", f"{getattr(args, flag):g}"]
    # No per-partition cap on tansu: a request of several events per partition is one record
    # batch there, which the worker reads as on Kafka (with the cap of 1 the fleet's events
    # queued behind one request per partition: 38% of waits within 50 ms against 74%).
    cmd += ["--fetch-max-wait-ms", str(fetch_wait_ms)]
    return cmd


def read_report(lines: Iterable[str], on_mark: Callable[[str], None]) -> dict[str, Any]:
    """The report among the script's stdout lines; ``on_mark("measuring" | "stopped")`` for
    the marks before it. Raises ValueError when no report came."""
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("event") == "report":
            return message
        on_mark(message.get("event", ""))
    raise ValueError("the TypeScript fleet printed no report")


def fill_measurements(m: Measurements, report: dict[str, Any]) -> None:
    """Feed the report's samples into ``m``, as the Python leg's callbacks record them."""
    with m.lock:
        m.decision_ms.extend(report["decisionMs"])
        m.watermark_ms.extend(report["watermarkMs"])
        m.wait_ms.extend(report["waitMs"])
        m.calls += report["calls"]
        m.timeouts += report["timeouts"]
    for run in report["loopingRuns"]:
        events = [decode_event(bytes.fromhex(text)) for text in run["events"]]
        m.on_looping_run(events, run["refusedAt"], run["allowed"])


def typescript_leg(
    broker: Any, on_mark: Callable[[str], None], args: Any, m: Measurements, workdir: Path
) -> dict[str, Any]:
    """Run the node fleet for fleet_bench's ``args`` and fill ``m`` (node's stderr goes to
    ``workdir``); ``on_mark`` is called as the measured time starts ("measuring") and ends
    ("stopped"). Returns the leg's extra figures (the node process's CPU over the measured
    time, its event loop delay, publish errors, warnings logged)."""
    cmd = node_command(broker.bootstrap, gateway_fetch_wait_ms(broker.profile), args)
    timeout = args.warmup + args.seconds + 180
    log_path = workdir / "fleet-typescript.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        try:
            stdout: IO[str] = proc.stdout  # type: ignore[assignment]
            report = read_report(stdout, on_mark)
            proc.wait()
        except ValueError:
            proc.wait()
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"the TypeScript fleet failed (exit {proc.returncode}):\n{tail}"
            ) from None
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
    fill_measurements(m, report)
    return {
        "client_cpu_s": round(report["cpuSeconds"] or 0.0, 1),
        "event_loop_delay_p99_ms": round(report["eventLoopDelayMs"]["p99"], 1),
        "publish_errors": report["stats"]["publishErrors"],
        "client_warnings": report["warnings"],
    }
