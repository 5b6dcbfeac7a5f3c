"""Fault: the broker restarts under a running worker, which must reconnect by itself.

The broker keeps its data in durable storage (an S3 bucket served by moto, see
:class:`ObjectStore`; this tansu build has no PostgreSQL engine), so a restart keeps
topics, changelog and committed offsets, exactly what a real Kafka restart does. The worker
and the gateway client are never restarted. The runs' events are split in three phases
around a graceful restart (SIGTERM) and a crash (SIGKILL) of the broker; each phase makes
decisions that depend on the run state built before it, so a lost table, a lost event or a
stuck consumer shows up as a difference from the pure core's decisions.

Not covered: a broker that comes back empty (memory storage). Its offsets start again at 0
while the worker still holds the old ones in memory, and a worker seen in that situation
skipped new messages; restart workers after the broker has lost its data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from object_store import ObjectStore
from services import ENABLED, Pipeline, control_topic_decisions
from test_reliability import expected, looping_run

from streams.audit.store import AuditStore
from streams.core.events import AgentEvent
from streams.devtools.embedded_broker import EmbeddedBroker
from streams.gateway.client import GatewayClient

pytestmark = [pytest.mark.integration, pytest.mark.broker("tansu")]  # a tansu of its own

RUNS = 4
CYCLES = 26
# Event indexes where each run's stream is cut; with 26 identical cycles the first phase
# ends in warnings, the second in a block and the third in aborts.
CUTS = (30, 42)
DURABLE_FETCH_WAIT_MS = 20


@pytest.fixture
def durable_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A tansu of its own (it gets restarted) on a bucket that outlives its process."""
    with (
        ObjectStore() as bucket,
        EmbeddedBroker(
            storage=bucket.storage_url, env=bucket.broker_env(), log_path=tmp_path / "tansu.log"
        ) as broker,
    ):
        yield broker


@pytest.fixture
def restart_pipeline(
    durable_broker: EmbeddedBroker, tmp_path: Path
) -> Iterator[tuple[Pipeline, GatewayClient]]:
    """One ready worker (SQLite audit trail) and a gateway client on the durable broker."""
    db_url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(db_url) as store:
        store.migrate()
    pipeline = Pipeline(durable_broker, db_url, tmp_path, config=ENABLED).setup()
    try:
        # This tansu keeps every partition in one moto S3 process, which lists a partition's
        # objects for each fetch: at the profile's 5 ms fetch wait, the worker's and the
        # gateway's idle fetches (hundreds a second) leave it too slow to bring the broker
        # back within the test's deadlines. 20 ms each, as the profile had before.
        pipeline.start_worker(LOOPGUARD_FETCH_MAX_WAIT_MS=str(DURABLE_FETCH_WAIT_MS))
        client = pipeline.client(fetch_max_wait_ms=DURABLE_FETCH_WAIT_MS)
        pipeline.wait_ready(client)
        try:
            yield pipeline, client
        except Exception:  # the test failed: its worker's log says why
            print(pipeline.worker_logs())
            raise
    finally:
        pipeline.close()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout:.0f}s")
        time.sleep(0.1)


def test_worker_reconnects_by_itself_after_broker_restarts(restart_pipeline) -> None:
    pipeline, client = restart_pipeline
    broker, worker = pipeline.broker, pipeline.workers[0]
    worker_log = worker.log_path
    assert worker_log is not None
    runs = {f"restart-run-{i}": looping_run(f"restart-run-{i}", CYCLES) for i in range(RUNS)}
    bounds = (0, *CUTS, 2 * CYCLES)
    phases: list[list[AgentEvent]] = [
        [e for events in zip(*(ev[lo:hi] for ev in runs.values()), strict=True) for e in events]
        for lo, hi in zip(bounds, bounds[1:], strict=False)
    ]
    published: list[AgentEvent] = []

    def seen() -> int:
        return len({d.decision_id for r in runs for d in client.decisions(r)})

    def publish(phase: list[AgentEvent]) -> int:
        """Publish one phase (flushed: the broker has it in the bucket); returns the backlog."""
        for event in phase:
            client.publish(event)
        client.flush()
        published.extend(phase)
        return len(expected(published)) - seen()

    def wait_all(label: str) -> None:
        want = len(expected(published))
        wait_until(lambda: seen() >= want, 60, f"{label}: {want} decisions")

    def refused() -> int:
        """The worker's failed reconnects so far (aiokafka logs each refused connect)."""
        return worker_log.read_text(errors="replace").count("Connect call failed")

    def outage(halt: Callable[[], None]) -> None:
        """Take the broker down until the worker has tried and failed to reconnect; restart."""
        before = refused()
        halt()
        wait_until(lambda: refused() > before, 30, "the worker retrying a broker that is down")
        broker.start()

    backlog = []
    try:
        publish(phases[0])
        wait_all("before any restart")
        # Each restart comes right after a phase is published: its events are in the
        # broker's storage, and the worker has not processed (all of) them yet.
        backlog.append(publish(phases[1]))
        outage(broker.stop)  # SIGTERM: connections closed cleanly
        wait_all("after a graceful broker restart")
        backlog.append(publish(phases[2]))
        outage(broker.kill)  # SIGKILL: connections just vanish
        wait_all("after a broker crash")
    except TimeoutError as exc:
        pytest.fail(f"{exc}; worker alive: {worker.alive}\n{pipeline.worker_logs(tail=20_000)}")
    assert worker.alive, "the worker must survive broker restarts, not be replaced"
    print(f"decisions still to come when the broker went down: {backlog}")

    want = expected(published)
    assert {d.action.value for d in want.values()} == {"warn", "block", "abort"}
    got = {d.decision_id: d for r in runs for d in client.decisions(r)}
    assert got == want, pipeline.worker_logs()

    # Read back from offset 0: decisions made before both restarts are still there (the
    # broker kept its data), and repeats (redelivery after a restart) are the same decision.
    on_topic = control_topic_decisions(
        pipeline.broker.bootstrap, pipeline.settings.topics.control, set(runs)
    )
    assert {d.decision_id for d in on_topic} == set(want)
    assert all(d == want[d.decision_id] for d in on_topic)
    print(f"physical repeats on the control topic: {len(on_topic) - len(want)}")

    with pipeline.store() as store:
        wait_until(lambda: sum(len(store.history(r)) for r in runs) >= len(want), 30, "audit trail")
        rows = [d for r in runs for d in store.history(r)]
    assert {d.decision_id: d for d in rows} == want
    assert len(rows) == len(want)  # no duplicate audit rows
