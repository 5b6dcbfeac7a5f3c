"""``loopguard worker``, ``doctor`` and ``tail`` against a real broker, as an operator types them:
each start-up mistake is one line naming the flag that fixes it, a fresh worker's status page
shows a working database before its first decision, doctor passes on a running deployment and
tail shows the decisions workers publish."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from streams.cli.tail_command import waiting_line
from streams.core.events import Action
from streams.devtools.embedded_broker import free_port
from streams.devtools.worker_process import CANARY_AGENT, WorkerProcess

pytestmark = pytest.mark.integration

LOOPGUARD = str(Path(sys.executable).parent / "loopguard")


def loopguard(*args: str, timeout: float = 90) -> tuple[int, str, str]:
    done = subprocess.run([LOOPGUARD, *args], capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


def worker_args(broker, tmp_path: Path, prefix: str, *extra: str) -> list[str]:
    return [
        "worker",
        *("--broker", broker.url, "--topic-prefix", prefix, "--app-id", prefix),
        *("--db", f"sqlite:///{tmp_path}/audit.db", "--data-dir", str(tmp_path / "data")),
        *extra,
    ]


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_worker_on_a_broker_without_transactions_names_the_profile(broker, tmp_path) -> None:
    if broker.profile != "tansu":
        pytest.skip("Apache Kafka accepts transactions")
    prefix = f"lg{uuid.uuid4().hex[:10]}"
    code, _, err = loopguard(*worker_args(broker, tmp_path, prefix, "--broker-profile", "kafka"))
    assert code == 1
    line = one_line(err)
    assert line.startswith(f"loopguard worker: broker {broker.url} refuses transactions (")
    assert line.endswith("use --broker-profile tansu")


def test_a_taken_web_port_is_one_line(broker, tmp_path) -> None:
    prefix = f"lg{uuid.uuid4().hex[:10]}"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = worker_args(broker, tmp_path, prefix, "--broker-profile", broker.profile)
        code, _, err = loopguard(*args, "--web-port", str(port))
    assert code == 1
    assert one_line(err) == (
        f"loopguard worker: --web-port {port}: 127.0.0.1:{port} is already in use (another "
        "worker or demo?); choose another port"
    )


def test_partitions_that_differ_from_the_topic_name_the_flag(broker, tmp_path) -> None:
    prefix = f"lg{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(f"{prefix}.events", 2, 1)])
    finally:
        admin.close()
    args = worker_args(broker, tmp_path, prefix, "--broker-profile", broker.profile)
    code, _, err = loopguard(*args, "--partitions", "4")
    assert code == 1
    assert one_line(err) == (
        f"loopguard worker: topic {prefix}.events exists with 2 partitions, not 4: start the "
        "worker with --partitions 2 (or use another --topic-prefix / --app-id for a new layout)"
    )

    # A new --topic-prefix with an --app-id whose changelog exists: the changelog's count.
    other = f"lg{uuid.uuid4().hex[:10]}"
    args = worker_args(broker, tmp_path, other, "--broker-profile", broker.profile)
    args[args.index("--app-id") + 1] = prefix
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(f"{prefix}-runs-changelog", 2, 1)])
    finally:
        admin.close()
    code, _, err = loopguard(*args, "--partitions", "4")
    assert code == 1
    assert one_line(err).startswith(
        f"loopguard worker: topic {prefix}-runs-changelog exists with 2 partitions, not 4: "
        "start the worker with --partitions 2"
    )


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(condition, what: str, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = condition()
        except OSError:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def test_a_fresh_worker_shows_a_working_database_before_any_decision(
    pipeline_factory, tmp_path
) -> None:
    """A new --app-id on existing topics, without --partitions: it takes the events topic's
    count for its changelogs (instead of failing on them), and its fresh trail is migrated at
    start, so the status page shows a working database before any decision."""
    fresh = f"sqlite:///{tmp_path}/fresh/audit.db"  # no file, no schema yet
    pipeline = pipeline_factory(fresh, partitions=3)  # topics exist with 3 partitions
    app_id = f"{pipeline.prefix}-new"
    port = free_port()
    worker = WorkerProcess(
        pipeline.broker.url,
        fresh,
        app_id=app_id,
        profile=pipeline.broker.profile,
        log_path=tmp_path / "worker.log",
        web_port=port,
        data_dir=str(tmp_path / "data"),
        env={"LOOPGUARD_TOPIC_PREFIX": pipeline.prefix},
    ).start()
    pipeline.workers.append(worker)  # stopped with the pipeline
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(f"{base}/healthz")[0] == 200, "the worker's web server")
    except TimeoutError:
        print(pipeline.worker_logs())
        raise
    status, page = get(f"{base}/status")
    assert status == 200, page
    assert '<span class="state-ok" id="db-state">ok</span>' in page
    assert "audit database unavailable" not in page
    admin = KafkaAdminClient(bootstrap_servers=pipeline.broker.bootstrap)
    try:
        (changelog,) = admin.describe_topics([f"{app_id}-runs-changelog"])
    finally:
        admin.close()
    assert len(changelog["partitions"]) == 3


def test_doctor_and_tail_on_a_running_deployment(pipeline_factory, migrated_db_url) -> None:
    pipeline = pipeline_factory(migrated_db_url)
    client = pipeline.start_ready()
    client.flush()
    p = pipeline.prefix
    common = ["--broker", pipeline.broker.url, "--topic-prefix", p]
    doctor = [
        "doctor",
        *common,
        *("--app-id", p, "--broker-profile", pipeline.broker.profile, "--db", migrated_db_url),
    ]

    last: list[str] = []

    def healthy() -> tuple[str, str] | None:
        code, out, err = loopguard(*doctor)
        last[:] = [out, err]
        return (out, err) if code == 0 else None

    # The group commits its offsets shortly after the readiness run: until then lag FAILs.
    try:
        out, err = wait_for(healthy, "doctor to pass", timeout=60)
    except TimeoutError:
        raise AssertionError("\n".join(last)) from None
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["ok", "broker"],
        ["ok", "profile"],
        ["ok", "topics"],
        ["ok", "database"],
        ["ok", "config"],
        ["ok", "lag"],
    ], out
    assert lines[0].startswith(f"ok    broker    {pipeline.broker.url} answers")
    assert err == ""

    code, out, err = loopguard(
        "tail",
        *common,
        "--from-beginning",
        "--agent",
        CANARY_AGENT,
        "--max",
        "1",
        "--json",
        "--timeout",
        "60",
    )
    assert code == 0, err
    first = json.loads(out.splitlines()[0])
    assert first["agent_id"] == CANARY_AGENT and first["action"] == Action.ABORT.value
    code, out, _ = loopguard(
        "tail",
        *common,
        "--from-beginning",
        "--run",
        first["run_id"],
        "--max",
        "1",
        "--timeout",
        "60",
    )
    assert code == 0
    assert f"  {first['run_id']}  agent={CANARY_AGENT}  seq={first['seq']}  ABORT" in out
    # From the end (the default) nothing new comes: --timeout ends it, exit code 0; stderr
    # says where it reads and that it waits (issue 41), stdout stays empty.
    code, out, err = loopguard("tail", *common, "--timeout", "2")
    assert code == 0 and out == ""
    assert err.splitlines() == [waiting_line(f"{p}.control", pipeline.broker.url, False)]
