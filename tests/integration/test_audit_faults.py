"""The audit database misbehaves; guarding goes on, the trail catches up, shutdown is bounded.

Issue 26: a record PostgreSQL refused stopped the audit trail for good; an immutable SQLite
file killed the worker with SIGBUS; a file read-only at start stayed unwritable until a
restart; SIGTERM hung for minutes while writes failed or the database was unreachable, with
the port held; ``/healthz`` said ok throughout. Each test injects the fault into a real
worker on a real broker and database, checks that a looping sentinel run is still blocked
and aborted, what ``/healthz`` says, and that once the fault clears the audit trail holds
exactly the decisions published on the control topic.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from services import ENABLED, IN_TIME_BUDGET_MS, Pipeline, control_topic_decisions
from sqlalchemy.engine import make_url
from test_web import get
from test_worker_faults import loop

from streams.audit import quarantine
from streams.core.events import Action, Decision
from streams.devtools.embedded_broker import free_port, port_in_use
from streams.devtools.worker_process import WorkerProcess
from streams.gateway.client import GatewayClient
from streams.wire.avro import encode_decision

pytestmark = pytest.mark.integration

WAIT = 90.0  # an upper bound for things that happen in seconds, never a timing assertion
UNREACHABLE_PG = "postgresql://nobody@127.0.0.1:1/x"


def wait_until(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.2)


def healthz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        status, _, body = get(f"http://127.0.0.1:{port}/healthz", timeout=10)
    except OSError:
        return 0, {}
    return status, json.loads(body) if body.startswith("{") else {}


def health_when(port: int, predicate: Callable[[int, dict[str, Any]], bool]) -> dict[str, Any]:
    seen: list[tuple[int, dict[str, Any]]] = []

    def check() -> bool:
        seen[:] = [healthz(port)]
        return predicate(*seen[0])

    try:
        wait_until("/healthz", check)
    except AssertionError:
        raise AssertionError(f"/healthz last said {seen}") from None
    return seen[0][1]


def guarded_sentinel(client: GatewayClient, agent: str = "sentinel", tool: str = "read") -> str:
    """A looping run; returns its id once the gateway got its block and its abort."""
    run = client.start_run(agent)
    loop(run, tool=tool)
    got = client.wait_for(
        run.run_id,
        lambda ds: {Action.BLOCK, Action.ABORT} <= {d.action for d in ds},
        timeout=WAIT,
    )
    assert {Action.BLOCK, Action.ABORT} <= {d.action for d in got}
    return run.run_id


def published(pipeline: Pipeline, run_ids: set[str]) -> set[str]:
    topic = pipeline.settings.topics.control
    return {
        d.decision_id for d in control_topic_decisions(pipeline.broker.bootstrap, topic, run_ids)
    }


def audited(pipeline: Pipeline, run_ids: set[str]) -> set[str]:
    with pipeline.store() as store:
        return {d.decision_id for r in sorted(run_ids) for d in store.history(r)}


def trail_equals_published(pipeline: Pipeline, run_ids: set[str]) -> None:
    want = published(pipeline, run_ids)
    assert want
    try:
        wait_until("the audit trail to hold every published decision",
                   lambda: audited(pipeline, run_ids) >= want)  # fmt: skip
    except AssertionError as exc:
        missing = len(want - audited(pipeline, run_ids))
        raise AssertionError(f"{exc}: {missing} missing\n{pipeline.worker_logs(30_000)}") from None
    assert audited(pipeline, run_ids) == want


def stopped(worker: WorkerProcess) -> int:
    """SIGTERM, then the exit status (waited for, never killed)."""
    assert worker.process is not None
    worker.process.send_signal(signal.SIGTERM)
    return worker.process.wait(timeout=WAIT)


@contextlib.contextmanager
def immutable(db_url: str) -> Iterator[Callable[[], None]]:
    """Make the SQLite file (and any journal beside it) immutable; yields a function that
    makes it writable again (also done on the way out)."""
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr (e2fsprogs)")
    path = Path(make_url(db_url).database or "")
    files = [str(p) for p in sorted(path.parent.glob(path.name + "*"))]

    def writable() -> None:
        subprocess.run(["chattr", "-i", *files], check=False)

    if subprocess.run(["chattr", "+i", *files], check=False).returncode != 0:
        pytest.skip("this filesystem does not take chattr +i")
    try:
        yield writable
    finally:
        writable()


def publish_decision(pipeline: Pipeline, decision: Decision) -> None:
    """Put a decision on the control topic as any producer with access could."""
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap)
    try:
        topic = pipeline.settings.topics.control
        producer.send(topic, key=decision.run_id.encode(), value=encode_decision(decision))
        producer.flush()
    finally:
        producer.close()


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_decision_postgresql_refuses_is_quarantined_and_the_trail_goes_on(
    pipeline_factory, migrated_db_url: str
) -> None:
    """A decision whose reason holds a NUL byte (PostgreSQL text cannot) was retried every 5 s
    forever and every later decision stayed unwritten, /healthz saying ok."""
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    port = free_port()
    pipeline.start_worker(web_port=port)
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    pipeline.wait_ready(client)

    refused = Decision(
        run_id="nul-run", agent_id="a", gateway_id="g", seq=1, event_time=1,
        action=Action.BLOCK, detector="generic_repeat", severity="critical", count=10,
        tool_name="read", reason="a reason with a NUL\x00 byte",
    )  # fmt: skip
    publish_decision(pipeline, refused)
    sentinel = guarded_sentinel(client)
    trail_equals_published(pipeline, {sentinel})  # the trail went on past the refusal

    with pipeline.store() as store:
        wait_until("the refused decision in quarantine", lambda: quarantine.count(store) >= 1)
        kept = quarantine.recent(store)
        assert store.history(refused.run_id) == []
    assert [(q.kind, q.record_key) for q in kept] == [("decision", refused.decision_id)]
    assert "NUL" in kept[0].error
    assert json.loads(kept[0].payload)["reason"] == refused.reason  # kept exactly
    health = health_when(port, lambda code, body: code == 200 and body.get("audit", {}).get(
        "quarantined", 0) >= 1)  # fmt: skip
    assert health["status"] == "ok" and health["audit"]["backlog"] == 0


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_an_immutable_sqlite_file_degrades_the_trail_never_the_guard_and_stop_is_prompt(
    pipeline_factory, migrated_db_url: str
) -> None:
    """The audit file turns immutable mid-stream: the worker keeps guarding (it died of
    SIGBUS), /healthz says degraded (it said ok), SIGTERM ends it and frees its port although
    writes fail (it hung), and a replacement on the same port writes what was left."""
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    port = free_port()
    # A deadline far away: the stop must end by itself, not by LOOPGUARD_SHUTDOWN_TIMEOUT.
    worker = pipeline.start_worker(web_port=port, LOOPGUARD_SHUTDOWN_TIMEOUT="3600")
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    pipeline.wait_ready(client)
    before = guarded_sentinel(client, agent="before")

    with immutable(migrated_db_url) as writable:
        during = guarded_sentinel(client)
        assert worker.alive, pipeline.worker_logs(20_000)
        health = health_when(port, lambda code, body: body.get("status") == "degraded")
        assert healthz(port)[0] == 200 and health["audit"]["status"] in ("failing", "lagging")
        assert health["audit"]["backlog"] > 0 and health["audit"]["last_error"]
        assert stopped(worker) == 0, pipeline.worker_logs(20_000)
        assert not port_in_use("127.0.0.1", port)
        writable()

    pipeline.start_worker(web_port=port)  # the port is free for its replacement
    trail_equals_published(pipeline, {before, during})
    health_when(port, lambda code, body: code == 200 and body.get("status") == "ok")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_sqlite_file_read_only_at_start_is_written_once_writable_without_a_restart(
    pipeline_factory, migrated_db_url: str
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    port = free_port()
    with immutable(migrated_db_url) as writable:
        worker = pipeline.start_worker(web_port=port, LOOPGUARD_SHUTDOWN_TIMEOUT="3600")
        client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
        pipeline.wait_ready(client)
        sentinel = guarded_sentinel(client)
        health = health_when(port, lambda code, body: body.get("status") == "degraded")
        assert "readonly" in (health["audit"]["last_error"] or "")
        writable()
        trail_equals_published(pipeline, {sentinel})
    assert worker.alive  # the same process: no restart needed
    health_when(port, lambda code, body: code == 200 and body.get("status") == "ok")
    # After write errors, a SIGTERM'd worker on Kafka (exactly once) failed its consumer's stop
    # on a second commit ("Not in the middle of a transaction") and lingered until killed.
    assert stopped(worker) == 0, pipeline.worker_logs(20_000)


def test_an_unreachable_postgresql_at_start_guards_degraded_and_stops_on_sigterm(
    pipeline_factory,
) -> None:
    """``--db postgresql://nobody@127.0.0.1:1/x``: SIGTERM was ignored for 10 minutes."""
    pipeline = pipeline_factory(UNREACHABLE_PG, config=ENABLED)
    port = free_port()
    worker = pipeline.start_worker(web_port=port, LOOPGUARD_SHUTDOWN_TIMEOUT="3600")
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    pipeline.wait_ready(client)
    guarded_sentinel(client)
    health = health_when(port, lambda code, body: body.get("status") == "degraded")
    assert healthz(port)[0] == 200 and health["audit"]["status"] == "failing"
    assert health["processing"]["status"] == "ok"
    assert stopped(worker) == 0, pipeline.worker_logs(20_000)
    assert not port_in_use("127.0.0.1", port)
