"""What the benches share: starting a fleet of workers, group progress, process memory.

One place for it, so every bench starts workers the same way (same group timeouts, config,
data dirs) and measures RSS and consumer progress the same way; the benches differ only in
the load they offer and the figures they print.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from streams.devtools.worker_process import WorkerProcess
from streams.settings import Settings, Topics

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
# Short group timeouts: tansu answers JoinGroup after about half the session timeout.
GROUP_ENV = {
    "LOOPGUARD_SESSION_TIMEOUT": "10",
    "LOOPGUARD_HEARTBEAT_INTERVAL": "1",
    "LOOPGUARD_REBALANCE_TIMEOUT": "20",
}


def bench_settings(broker, partitions: int, app_id: str, prefix: str = "loopguard") -> Settings:
    """Settings of the broker's profile for ``app_id`` on topics ``<prefix>.*``."""
    settings = Settings.for_profile(
        broker.profile, broker=broker.url, partitions=partitions, app_id=app_id
    )
    return replace(settings, topics=Topics.with_prefix(prefix))


def start_workers(
    broker,  # bench.brokers: EmbeddedBroker | ClusterBroker
    count: int,
    workdir: Path,
    *,
    db_url: str,
    config_file: Path,
    partitions: int,
    app_id: str = "loopguard",
    prefix: str = "loopguard",
    env: dict[str, str] | None = None,
    web_port: int | None = None,
    role: str = "all",
) -> list[WorkerProcess]:
    """Start ``count`` workers of one app and ``role`` (one consumer group); the caller
    stops them. ``web_port``: the first worker's web port (its /metrics), the next ones' the
    ports after. A role other than all names its logs and data dirs (``<app>-worker-guard-0``)."""
    suffix = "" if role == "all" else f"-{role}"
    workers = [
        WorkerProcess(
            broker.url,
            db_url,
            profile=broker.profile,
            app_id=app_id,
            log_path=workdir / f"{app_id}-worker{suffix}-{i}.log",
            config_file=str(config_file),
            partitions=partitions,
            data_dir=str(workdir / f"{app_id}-data{suffix}-{i}"),
            env={
                **GROUP_ENV,
                **(env or {}),
                "LOOPGUARD_TOPIC_PREFIX": prefix,
                "LOOPGUARD_ROLE": role,
            },
            web_port=web_port + i if web_port else None,
        )
        for i in range(count)
    ]
    for worker in workers:
        worker.start()
    return workers


ROLES = ("all", "split")  # the benches' --roles


def start_roles(broker, count: int, workdir: Path, *, roles: str, **kwargs) -> list[WorkerProcess]:
    """``count`` workers of role all, or with ``roles="split"`` ``count`` guards and one audit
    process of the same app (consumer group ``<app>-audit``), guards first; ``kwargs`` as
    :func:`start_workers`, whose web port only the guards get."""
    if roles == "all":
        return start_workers(broker, count, workdir, **kwargs)
    guards = start_workers(broker, count, workdir, role="guard", **kwargs)
    return guards + start_workers(broker, 1, workdir, role="audit", **{**kwargs, "web_port": None})


def process_role(process: WorkerProcess) -> str:
    """The role a worker was started with (all where none was set: a baseline too)."""
    return process.env.get("LOOPGUARD_ROLE", "all")


def event_consumers(processes: list[WorkerProcess]) -> list[WorkerProcess]:
    """The processes that own events partitions: all but an audit process."""
    return [p for p in processes if process_role(p) != "audit"]


def worker_ready(process: WorkerProcess) -> bool:
    """Whether this run of the worker logged Faust's ``Ready`` (its first assignment
    recovered; an audit process logs no events partitions). Lines an earlier run left in the
    same log carry another pid."""
    if process.process is None or process.log_path is None or not process.log_path.exists():
        return False
    pid = f"[{process.process.pid}]"
    text = process.log_path.read_text(errors="replace")
    return any(pid in line and "]: Ready" in line for line in text.splitlines())


FORWARDERS = Path(__file__).resolve().parents[1] / "forwarders.py"  # its launcher


class ForwarderProcess(WorkerProcess):
    """A baseline forwarder run like a worker (same start/stop, same LOOPGUARD_* settings)."""

    kind = "aiokafka"

    def command(self) -> list[str]:
        return [sys.executable, str(FORWARDERS), self.kind]


AIOKAFKA_COMMIT_INTERVAL = 0.1  # seconds: the bare aiokafka loop's commits (see below)


def start_forwarder(kind: str, broker, prefix: str, partitions: int, tmp: Path):
    """One ``bench/forwarders.py`` baseline on ``<prefix>.*``, its consumer group ``prefix``."""
    env = {
        **GROUP_ENV,
        "LOOPGUARD_BROKER": broker.url,
        "LOOPGUARD_BROKER_PROFILE": broker.profile,
        "LOOPGUARD_APP_ID": prefix,
        "LOOPGUARD_TOPIC_PREFIX": prefix,
        "LOOPGUARD_PARTITIONS": str(partitions),
        "LOOPGUARD_DATA_DIR": str(tmp / f"{prefix}-data"),
        # Plain batching (Kafka's 16 KB default) for every baseline on every broker, as
        # both of loopguard's broker profiles now batch (16 KB).
        "LOOPGUARD_PRODUCER_MAX_BATCH": "16384",
        # Plain consume -> produce, as the aiokafka loop does; the kafka profile's exactly once
        # is loopguard's (a bare Faust app without tables also crashes on it in Faust 0.15.3:
        # KeyError in PartitionAssignor.group_for_topic at the first assignment).
        "LOOPGUARD_PROCESSING_GUARANTEE": "at_least_once",
    }
    if kind == "aiokafka":
        # It drains the throughput bench's backlog in about a second, and its timed window
        # runs from one commit to another: at the default 0.5 s that is two or three commits,
        # and its events/s swung 52,000-140,000 between runs of one session (2026-12-06).
        env["LOOPGUARD_COMMIT_INTERVAL"] = str(AIOKAFKA_COMMIT_INTERVAL)
    process = ForwarderProcess(broker.url, "", log_path=tmp / f"{prefix}.log", env=env)
    process.kind = kind
    return [process.start()]


def wait_until_echoing(client, echo, agent_id: str, timeout: float = 90.0) -> None:
    """Publish a probe run's event through ``client`` until the echo's watermark for it
    comes back (an echo decides nothing, so no canary decision can tell it is up)."""
    deadline = time.monotonic() + timeout
    while True:
        if not echo.alive:
            raise RuntimeError(f"the echo exited; see {echo.log_path}")
        run = client.start_run(agent_id)
        try:
            client.wait_processed(run.run_id, run.seq, timeout=2.0)
            return
        except TimeoutError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the echo answered nothing in {timeout:g} s") from None


def broker_pids(broker) -> list[int]:
    """The broker's processes: tansu's one, or every node of the Kafka cluster."""
    cluster = getattr(broker, "cluster", None)
    if cluster is not None:
        return [pid for i in range(cluster.nodes) if (pid := cluster.pid(i))]
    return [broker.process.pid]


# --------------------------------------------------------------------- consumer progress


class GroupProgress:
    """Committed offsets of a consumer group against the end offsets of its input topic.

    Measures any consumer the same way (aiokafka loop, Faust app, loopguard workers): it is
    done with the input when it has committed up to the end of every partition.
    """

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int) -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
        )
        self.partitions = [TopicPartition(topic, p) for p in range(partitions)]

    def ends(self) -> dict[TopicPartition, int]:
        return self.consumer.end_offsets(self.partitions)

    def committed(self) -> dict[TopicPartition, int]:
        return {tp: self.consumer.committed(tp) or 0 for tp in self.partitions}

    def wait_for(
        self,
        ends: dict[int, int] | dict[TopicPartition, int],
        timeout: float,
        alive=None,
        report=None,
        every: float = 10.0,
    ) -> float:
        """Poll (every 50 ms) until every partition is committed up to ``ends`` (by partition
        number or TopicPartition); returns the monotonic time that was first seen.
        ``alive()`` returning False aborts; ``report(committed)`` is called every ``every`` s."""
        want = {
            (tp.partition if isinstance(tp, TopicPartition) else tp): e for tp, e in ends.items()
        }
        deadline = last = time.monotonic()
        deadline += timeout
        while True:
            committed = {tp.partition: c for tp, c in self.committed().items()}
            now = time.monotonic()
            if all(committed.get(p, 0) >= end for p, end in want.items()):
                return now
            if now > deadline:
                left = sum(end - committed.get(p, 0) for p, end in want.items())
                raise TimeoutError(f"{left} records not committed after {timeout:.0f}s")
            if alive is not None and not alive():
                raise RuntimeError("a consumer process died; see its log")
            if report is not None and now - last >= every:
                last = now
                report(sum(min(committed.get(p, 0), end) for p, end in want.items()))
            time.sleep(0.05)

    def close(self) -> None:
        self.consumer.close()


# -------------------------------------------------------------------------- process memory


def rss_kb(pid: int | None, field_name: str = "VmRSS") -> int | None:
    """A field of /proc/PID/status in kB (VmRSS now, VmHWM the peak), None when gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    """Samples VmRSS of every pid every ``interval`` seconds."""

    def __init__(self, pids: list[int | None], interval: float = 0.5) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pids = pids
        self.interval = interval
        self.samples: list[tuple[float, list[int | None]]] = []
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> list[int | None]:
        values = [rss_kb(pid) for pid in self.pids]
        self.samples.append((time.perf_counter(), values))
        return values

    def peak_between(self, start: float, end: float) -> list[int]:
        peaks = [0] * len(self.pids)
        for t, values in self.samples:
            if start <= t <= end:
                for i, v in enumerate(values):
                    peaks[i] = max(peaks[i], v or 0)
        return peaks

    def stop(self) -> None:
        self._stop.set()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    """The 1/5/15-minute load average, from /proc/loadavg (os.getloadavg where it is absent):
    printed beside figures, which mean little on a busy machine."""
    try:
        with open("/proc/loadavg") as loadavg:
            return ", ".join(loadavg.read().split()[:3])
    except OSError:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def mb(kb: int | None) -> str:
    return "n/a" if kb is None else f"{kb / 1024:,.0f} MB"


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(round(q * len(sorted_values))) - 1))
    return sorted_values[index]


# ---------------------------------------------------------------------- readiness, topics


def owned_partitions(worker: WorkerProcess) -> list[int] | None:
    """The events partitions of the last assignment the worker logged ([] before its first),
    None without a log."""
    marker = "events partitions assigned to this worker: "
    if worker.log_path is None or not worker.log_path.exists():
        return None
    lines = [
        line.split(marker, 1)[1]
        for line in worker.log_path.read_text(errors="replace").splitlines()
        if marker in line
    ]
    text = lines[-1].strip() if lines else "[]"
    return [int(p) for p in text.strip("[]").split(",") if p.strip()]


def assignment_complete(workers: list[WorkerProcess], partitions: int) -> bool:
    """Whether the last assignment each worker logged is non-empty and together they cover
    every partition once: all workers joined, no rebalance left to run."""
    latest = [owned_partitions(worker) for worker in workers]
    if not all(latest):
        return False
    owned = [p for parts in latest for p in parts or []]
    return sorted(owned) == list(range(partitions))


def settled(processes: list[WorkerProcess], partitions: int) -> bool:
    """Whether a contender is past its start-up: its event consumers hold every partition
    once (:func:`assignment_complete`) and an audit process (``--roles split``) is ready."""
    consumers = event_consumers(processes)
    audits = [p for p in processes if p not in consumers]
    return assignment_complete(consumers, partitions) and all(worker_ready(p) for p in audits)


def scan_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 300.0):
    """Every record of ``topic`` from the beginning to its current end, partition by
    partition (a group-less consumer; yields kafka-python ConsumerRecords)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_bytes=64 * 1_048_576,
        max_partition_fetch_bytes=16 * 1_048_576,
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not read to its end in {timeout:.0f}s")
            for batch in consumer.poll(timeout_ms=500, max_records=50_000).values():
                yield from batch
    finally:
        consumer.close()


AGE_METRIC = "loopguard_event_age_seconds"  # a worker's event age at take (its /metrics)


ROUND_METRIC = "loopguard_settle_round_seconds"  # exactly once: its settling rounds
STAGE_METRIC = "loopguard_event_stage_age_seconds"  # its age at each stage, per fetch/batch
STAGES = ("fetched", "handed", "taken", "decided", "published")  # in the order they happen


def scrape_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


@dataclass(frozen=True)
class WorkerHistograms:
    """The histograms the benches read off a worker's /metrics, from one scrape: cumulative
    count per upper bound (empty for a histogram the worker does not have)."""

    ages: dict[float, float]  # AGE_METRIC
    rounds: dict[float, float]  # ROUND_METRIC
    stages: dict[str, dict[float, float]]  # STAGE_METRIC, per stage


def worker_histograms(port: int) -> WorkerHistograms:
    """One scrape of a worker's /metrics, read for every histogram the benches report (one
    request at a measurement's start and end, not one per histogram)."""
    text = scrape_metrics(port)
    return WorkerHistograms(
        ages=labelled_buckets(text, AGE_METRIC).get("", {}),
        rounds=labelled_buckets(text, ROUND_METRIC).get("", {}),
        stages=labelled_buckets(text, STAGE_METRIC, "stage"),
    )


def labelled_buckets(text: str, name: str, label: str = "") -> dict[str, dict[float, float]]:
    """Histogram ``name`` in a /metrics text, per value of ``label`` ("" when unlabelled):
    cumulative count per upper bound."""
    series: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name == f"{name}_bucket":
                key = sample.labels.get(label, "") if label else ""
                series.setdefault(key, {})[float(sample.labels["le"])] = sample.value
    return series


def stage_age_figures(
    before: dict[str, dict[float, float]], after: dict[str, dict[float, float]]
) -> dict[str, dict]:
    """Per stage observed between two scrapes: p50 and p99 (bucket upper bounds, ms) and
    how many observations (fetches or batches) that was."""
    figures = {}
    for stage in STAGES:
        if stage not in after:
            continue
        p50, seen = bucket_quantile(before.get(stage, {}), after[stage], 0.5)
        p99, _ = bucket_quantile(before.get(stage, {}), after[stage], 0.99)
        if seen:
            figures[stage] = {"p50_max_ms": p50 * 1000, "p99_max_ms": p99 * 1000, "seen": seen}
    return figures


def stage_age_lines(figures: dict[str, dict]) -> list[str]:
    """The printed table of :func:`stage_age_figures`: one line per stage, in order."""
    if not figures:
        return []
    lines = [
        f"  event age by stage (its {STAGE_METRIC}, one observation per fetch or batch, "
        "bucket bounds):",
        f"    {'stage':<10} {'p50 <=':>10} {'p99 <=':>10} {'seen':>8}",
    ]
    for stage, row in figures.items():
        lines.append(
            f"    {stage:<10} {row['p50_max_ms']:>7g} ms {row['p99_max_ms']:>7g} ms "
            f"{row['seen']:>8}"
        )
    return lines


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float):
    """The upper bound of the bucket holding quantile ``q`` of what was observed between two
    scrapes (None when nothing was), and how many observations that was."""
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return None, 0
    for le, cumulative in counts:
        if cumulative >= q * total:
            return le, int(total)
    return counts[-1][0], int(total)


def round_figures(before: dict[float, float], after: dict[float, float]) -> dict:
    """The settling rounds committed between two scrapes of :data:`ROUND_METRIC`: how many,
    and their p50 and p99 as bucket upper bounds in ms (None when there were none)."""
    p50, rounds = bucket_quantile(before, after, 0.5)
    p99, _ = bucket_quantile(before, after, 0.99)
    return {
        "rounds": rounds,
        "p50_max_ms": None if p50 is None else p50 * 1000,
        "p99_max_ms": None if p99 is None else p99 * 1000,
    }


def event_age_figures(before: dict[float, float], after: dict[float, float]) -> dict:
    """p50 and p99 of the events' age between two scrapes of :data:`AGE_METRIC`, as bucket
    upper bounds in ms (None when nothing was observed), and how many events that was."""
    p50, aged = bucket_quantile(before, after, 0.5)
    p99, _ = bucket_quantile(before, after, 0.99)
    return {
        "event_age_p50_max_ms": None if p50 is None else p50 * 1000,
        "event_age_p99_max_ms": None if p99 is None else p99 * 1000,
        "events_aged": aged,
    }
