"""Service fixtures for integration tests: a real broker and real loopguard workers.

The ``broker`` fixture runs the suite on the brokers ``LOOPGUARD_TEST_BROKER`` names: the
embedded tansu broker (memory storage, the default), a 3-node Apache Kafka cluster
(tests/kafka_cluster; ``kafka``) or both (``tansu,kafka``). One broker per test session, and
under pytest-xdist one Kafka cluster for all of the session's processes (started by the
first that needs it, stopped by the controller at the end, see :func:`shared_kafka_cluster`);
every pipeline gets its own app id and topic prefix, so tests never see each other's events,
groups or tables. A test that breaks its cluster on purpose takes one of its own
(``private_kafka_cluster``). Workers are child
processes started exactly as an operator would (``loopguard worker``), with short broker
session timeouts so a restarted worker takes over quickly. Readiness is a canary run whose
decision must come back, never a fixed sleep.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka_cluster.cluster import KafkaCluster

from streams.audit.store import AuditStore
from streams.core.events import Decision
from streams.devtools.embedded_broker import EmbeddedBroker
from streams.devtools.worker_process import WorkerProcess, wait_until_processing
from streams.gateway.client import GatewayClient
from streams.kafka.acls import create_acls, fleet_acls
from streams.kafka.topics import admin_client, all_partitions, ensure_topics
from streams.settings import Settings, Topics
from streams.wire.avro import decode_control

# tansu answers JoinGroup after about max(1 s, session timeout / 2), and a worker that
# replaces a killed one waits for the dead member's session to expire: keep both short.
FAST_GROUP_ENV = {
    "LOOPGUARD_SESSION_TIMEOUT": "2",
    "LOOPGUARD_HEARTBEAT_INTERVAL": "0.5",
    "LOOPGUARD_REBALANCE_TIMEOUT": "10",
}
ENABLED = {"tools": {"loopDetection": {"enabled": True}}}
IN_TIME_BUDGET_MS = 10_000  # a gateway waits this long for a live worker's verdict
# Worker log lines a failure message can do without: Faust's offset tables, its timer warnings.
LOG_NOISE = re.compile(r"^(?:[|+]|\S*〃|.*Timer commit is overlapping)")


SHARED_DIR_ENV = "LOOPGUARD_TEST_SHARED_DIR"  # made by conftest.py for the session's processes
SHARED_KAFKA_DIR = "kafka"  # the shared cluster's folder in it (see shared_kafka_cluster)


def chosen_brokers() -> list[str]:
    """``LOOPGUARD_TEST_BROKER``: which brokers the integration suite runs on (default tansu,
    the embedded default; CI adds ``kafka``)."""
    chosen = [b.strip() for b in os.environ.get("LOOPGUARD_TEST_BROKER", "tansu").split(",")]
    unknown = set(chosen) - {"tansu", "kafka"}
    if unknown or not chosen:
        raise pytest.UsageError(f"LOOPGUARD_TEST_BROKER: unknown broker(s) {sorted(unknown)}")
    return chosen


def test_broker(item: pytest.Item) -> str | None:
    """The broker a test runs on: its ``broker`` fixture's parameter, or its
    ``@pytest.mark.broker(name)`` for a test that brings a broker of its own. An integration
    test that uses no broker (a CLI usage error, say) goes with the default pass, tansu's, so
    a Kafka-only pass does not run it twice; unit tests belong to no broker."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "broker" in callspec.params:
        return str(callspec.params["broker"])
    marker = item.get_closest_marker("broker")
    if marker:
        return str(marker.args[0])
    return "tansu" if item.get_closest_marker("integration") else None


test_broker.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (never skip) the tests of brokers ``LOOPGUARD_TEST_BROKER`` leaves out, so a
    Kafka-only pass runs every Kafka test once and nothing else (the summary counts them)."""
    chosen = set(chosen_brokers())
    kept, dropped = [], []
    for item in items:
        broker = test_broker(item)
        (dropped if broker is not None and broker not in chosen else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_configure(config: pytest.Config) -> None:
    # The controller (or a lone pytest) makes the folder its xdist workers share; they
    # inherit it through the environment.
    if not hasattr(config, "workerinput") and SHARED_DIR_ENV not in os.environ:
        os.environ[SHARED_DIR_ENV] = tempfile.mkdtemp(prefix="loopguard-tests-")


def pytest_unconfigure(config: pytest.Config) -> None:
    # The controller (not an xdist worker) stops the Kafka cluster its workers shared.
    if not hasattr(config, "workerinput") and SHARED_DIR_ENV in os.environ:
        shared = Path(os.environ.pop(SHARED_DIR_ENV))
        stop_shared_kafka_cluster(shared)
        shutil.rmtree(shared, ignore_errors=True)


@dataclass
class KafkaClusterBroker:
    """A 3-node Apache Kafka (KRaft) cluster on loopback, with EmbeddedBroker's interface."""

    cluster: KafkaCluster
    profile = "kafka"

    @property
    def url(self) -> str:
        return ";".join(f"kafka://{address}" for address in self.cluster.bootstrap.split(","))

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap


def new_kafka_cluster(data_dir: Path) -> KafkaCluster:
    """A 3-node test cluster in ``data_dir`` (its state file there, if any, is loaded)."""
    # Workers in tests use 2 s group sessions (FAST_GROUP_ENV) so a killed one is replaced fast.
    fast_groups = {"group.min.session.timeout.ms": "1000"}
    return KafkaCluster(nodes=3, base_port=0, data_dir=data_dir, extra_config=fast_groups)


def shared_kafka_cluster(shared: Path) -> KafkaCluster:
    """The one cluster of an xdist session: the first process that needs it starts it, under a
    file lock, the others attach to it through its state file (ports and pids).

    ``shared`` is the folder all the session's processes share (``SHARED_DIR_ENV``);
    :func:`stop_shared_kafka_cluster` stops the cluster when the whole session ends."""
    data = shared / SHARED_KAFKA_DIR
    with FileLock(str(shared / f"{SHARED_KAFKA_DIR}.lock")):
        cluster = new_kafka_cluster(data)
        if not all(cluster.running(i) for i in range(cluster.nodes)):
            cluster.start()
    cluster.wait_ready()
    return cluster


def stop_shared_kafka_cluster(shared: Path) -> None:
    """Stop the xdist session's shared cluster, if one was started (throw-away data)."""
    data = shared / SHARED_KAFKA_DIR
    if data.is_dir():
        new_kafka_cluster(data).stop(graceful=False)


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Fetched with Maven into a cache outside the repo; a failure fails the tests loudly.

    Under pytest-xdist every process shares one cluster (a cluster per process would be three
    more JVMs each on a 2-core machine); tests keep apart by topic prefix and app id."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        yield shared_kafka_cluster(Path(os.environ[SHARED_DIR_ENV]))
        return
    cluster = new_kafka_cluster(tmp_path_factory.mktemp("kafka")).start()
    try:
        yield cluster
    finally:
        cluster.stop(graceful=False)


@pytest.fixture(scope="module")
def private_kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A cluster of the test module's own, for tests that kill and restart its nodes: the
    shared one serves other tests at the same time under pytest-xdist."""
    cluster = new_kafka_cluster(tmp_path_factory.mktemp("private-kafka")).start()
    try:
        yield cluster
    finally:
        cluster.stop(graceful=False)


# Principals of the SASL cluster (issue 26): passwords for a throw-away loopback cluster.
SASL_USERS = {"admin": "admin-secret", "gateway": "gateway-secret", "worker": "worker-secret"}


@pytest.fixture(scope="session")
def sasl_kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A private one-node KRaft cluster with a SASL_PLAINTEXT SCRAM-SHA-512 listener
    (``sasl_bootstrap``), the StandardAuthorizer and ``admin`` as super user: started only
    when a test asks for it, stopped when the session ends."""
    cluster = KafkaCluster(
        nodes=1,
        base_port=0,
        data_dir=tmp_path_factory.mktemp("sasl-kafka"),
        extra_config={"group.min.session.timeout.ms": "1000"},
        scram_users=SASL_USERS,
    ).start()
    try:
        yield cluster
    finally:
        cluster.stop(graceful=False)


def sasl_env(user: str) -> dict[str, str]:
    """The LOOPGUARD_* variables that make a worker or a command authenticate as ``user``."""
    return {
        "LOOPGUARD_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "LOOPGUARD_SASL_MECHANISM": "SCRAM-SHA-512",
        "LOOPGUARD_SASL_USERNAME": user,
        "LOOPGUARD_SASL_PASSWORD": SASL_USERS[user],
    }


@dataclass(frozen=True)
class SecuredFleet:
    """A fleet's topics on the SASL cluster under a fresh prefix, with the ACLs of
    streams/kafka/acls.py (those compose/ creates), as the admin made them."""

    broker_url: str
    prefix: str
    topics: Topics
    base: Settings

    def as_user(self, user: str) -> Settings:
        """The fleet's settings authenticating as ``user`` (one of SASL_USERS)."""
        return replace(
            self.base,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=user,
            sasl_password=SASL_USERS[user],
        )


def secured_fleet(cluster: KafkaCluster, db_url: str) -> SecuredFleet:
    """Create a fresh fleet's topics and ACLs on ``sasl_kafka_cluster`` as the admin."""
    prefix = f"lg{uuid.uuid4().hex[:10]}"
    broker_url = ";".join(f"kafka://{a}" for a in cluster.sasl_bootstrap.split(","))
    topics = Topics.with_prefix(prefix)
    base = Settings.for_profile(
        "kafka",
        app_id=prefix,
        broker=broker_url,
        db_url=db_url,
        partitions=2,
        replication=1,
        min_insync_replicas=1,
        topics=topics,
    )
    fleet = SecuredFleet(broker_url, prefix, topics, base)
    admin_settings = fleet.as_user("admin")
    ensure_topics(admin_settings)
    admin = KafkaAdminClient(
        bootstrap_servers=cluster.sasl_bootstrap, **admin_settings.kafka_client_options()
    )
    try:
        create_acls(admin, fleet_acls(topics, prefix, gateway="gateway", worker="worker"))
    finally:
        admin.close()
    return fleet


@pytest.fixture(scope="session", params=chosen_brokers())
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedBroker | KafkaClusterBroker]:
    if request.param == "kafka":
        yield KafkaClusterBroker(request.getfixturevalue("kafka_cluster"))
        return
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


@dataclass
class Pipeline:
    """Topics, workers and a gateway client of one isolated loopguard deployment."""

    broker: EmbeddedBroker | KafkaClusterBroker
    db_url: str
    workdir: Path
    config: dict[str, Any] | None = None
    partitions: int = 4
    prefix: str = field(default_factory=lambda: f"lg{uuid.uuid4().hex[:10]}")
    workers: list[WorkerProcess] = field(default_factory=list)
    clients: list[GatewayClient] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        # Workers inherit LOOPGUARD_PROCESSING_GUARANTEE from the test's environment; the
        # tests' checks of "exactly once" must see the same guarantee the workers run.
        guarantee = os.environ.get("LOOPGUARD_PROCESSING_GUARANTEE")
        overrides = {"processing_guarantee": guarantee} if guarantee else {}
        return Settings.for_profile(
            self.broker.profile,
            **overrides,
            app_id=self.prefix,
            broker=self.broker.url,
            db_url=self.db_url,
            partitions=self.partitions,
            topics=Topics.with_prefix(self.prefix),
        )

    def setup(self) -> Pipeline:
        ensure_topics(self.settings)
        return self

    def start_worker(self, *, web_port: int | None = None, **env: str) -> WorkerProcess:
        config_file = None
        if self.config is not None:
            config_file = self.workdir / f"{self.prefix}-config.json"
            config_file.write_text(json.dumps(self.config))
        worker = WorkerProcess(
            self.broker.url,
            self.db_url,
            app_id=self.prefix,
            profile=self.broker.profile,
            log_path=self.workdir / f"worker-{len(self.workers)}.log",
            config_file=str(config_file) if config_file else None,
            partitions=self.partitions,
            data_dir=str(self.workdir / "data"),
            web_port=web_port,
            env={**FAST_GROUP_ENV, "LOOPGUARD_TOPIC_PREFIX": self.prefix, **env},
        ).start()
        self.workers.append(worker)
        return worker

    def client(self, gateway_id: str = "gw-test", **options: Any) -> GatewayClient:
        # tansu holds a fetch for its whole wait even when decisions arrive: use the profile's
        # short wait there; Kafka answers at once, so the client's default only paces idling.
        options.setdefault("fetch_max_wait_ms", min(20, self.settings.fetch_max_wait_ms))
        client = GatewayClient(
            self.broker.bootstrap, gateway_id, topics=self.settings.topics, **options
        )
        self.clients.append(client)
        return client

    def wait_ready(self, client: GatewayClient, timeout: float = 90.0) -> None:
        wait_until_processing(client, timeout=timeout, workers=self.workers)

    def start_ready(self, **client_options: Any) -> GatewayClient:
        """Start a worker and a gateway client; return once the worker processes events."""
        self.start_worker()
        client = self.client(**client_options)
        try:
            self.wait_ready(client)
        except Exception:
            print(self.worker_logs())
            raise
        return client

    def store(self) -> AuditStore:
        return AuditStore(self.db_url)

    def worker_logs(self, tail: int = 4000, *, without_noise: bool = False) -> str:
        """Each worker's log, its last ``tail`` characters; ``without_noise`` drops Faust's
        offset tables and timer-overlap warnings first, which otherwise fill a failure
        message's tail that should show the rebalances."""
        logs = []
        for w in self.workers:
            if not (w.log_path and w.log_path.exists()):
                continue
            text = w.log_path.read_text(errors="replace")
            if without_noise:
                lines = (line for line in text.splitlines() if line.strip())
                text = "\n".join(line for line in lines if not LOG_NOISE.match(line.strip()))
            logs.append(f"--- {w.log_path} ---\n{text[-tail:]}")
        return "\n".join(logs)

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for worker in self.workers:
            worker.stop()


def control_topic_decisions(bootstrap: str, topic: str, run_ids: set[str]) -> list[Decision]:
    """Every decision physically on the control topic for these runs, repeats included.

    Read committed: on Apache Kafka a worker's aborted transactions are not decisions."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        consumer_timeout_ms=2000,
        isolation_level="read_committed",
    )
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    found = [decode_control(record.value) for record in consumer]
    consumer.close()
    return [d for d in found if isinstance(d, Decision) and d.run_id in run_ids]


def records_by_key(bootstrap: str, topic: str) -> Counter[bytes]:
    """How many records of each key are on the topic (read uncommitted)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, consumer_timeout_ms=2000)
    parts = all_partitions(consumer, topic)
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    counts = Counter(record.key for record in consumer)
    consumer.close()
    return counts


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end offset, read committed (the last stable offset)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, isolation_level="read_committed"
    )
    ends = {
        tp.partition: end
        for tp, end in consumer.end_offsets(all_partitions(consumer, topic)).items()
    }
    consumer.close()
    return ends


def committed_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """The workers' committed offset of each partition of the topic that has one."""
    group = settings.app_id
    admin = admin_client(settings, timeout=10.0)
    try:
        committed = admin.list_group_offsets(group).get(group, {})
    finally:
        admin.close()
    return {tp.partition: meta.offset for tp, meta in committed.items() if tp.topic == topic}


def where_missing(pipeline: Pipeline, missing: list[str], client: GatewayClient) -> str:
    """Where the decisions a gateway never received got to, so a failure names the stalled
    side: on the control topic (the gateway's reading), in the audit trail only, or nowhere
    (the worker, or the events it was given: counted by run id on the events topic), with
    how far the worker committed each events partition and the gateway read each control
    partition, against their ends."""
    run_ids = {decision_id.split(":")[0] for decision_id in missing}
    bootstrap, topics = pipeline.broker.bootstrap, pipeline.settings.topics
    on_events = records_by_key(bootstrap, topics.events)
    committed = committed_offsets(pipeline.settings, topics.events)
    worker = ", ".join(
        f"{p}: {committed.get(p)}/{end}" for p, end in end_offsets(bootstrap, topics.events).items()
    )
    reached = client.control_reached
    gateway = ", ".join(
        f"{p}: {reached.get(p)}/{end}" for p, end in end_offsets(bootstrap, topics.control).items()
    )
    events = ", ".join(f"{r} {on_events[r.encode()]}" for r in sorted(run_ids))
    on_topic = {d.decision_id for d in control_topic_decisions(bootstrap, topics.control, run_ids)}
    with pipeline.store() as store:
        audited = {d.decision_id for r in run_ids for d in store.history(r)}
    wanted = set(missing)
    return (
        f"of {len(wanted)} missing at the gateway: {len(wanted & on_topic)} on the control "
        f"topic, {len(wanted & audited)} in the audit trail; events on the events topic: "
        f"{events}; events committed/end {worker}; control read/end {gateway}"
    )


def decision_differences(
    pipeline: Pipeline, client: GatewayClient, got: dict[str, Decision], want: dict[str, Decision]
) -> str:
    """A failed comparison of decisions by id, for its message: how many were missing, extra
    and changed and which, where the missing ones got to (:func:`where_missing`), then the
    workers' logs, then that account again (CI keeps only the output's tail)."""
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    changed = sorted(i for i in set(want) & set(got) if want[i] != got[i])
    try:
        where = where_missing(pipeline, missing, client)
    except Exception as exc:  # the logs below matter more
        where = f"where the missing went not read: {exc!r}"
    account = (
        f"{len(got)} decisions, {len(want)} expected; {len(missing)} missing {missing[:12]}, "
        f"{len(extra)} extra {extra[:12]}, {len(changed)} changed {changed[:6]}; {where}"
    )
    logs = pipeline.worker_logs(12_000, without_noise=True)
    return f"{account}\n{logs}\n{account}"


def assert_same_decisions(
    pipeline: Pipeline, client: GatewayClient, got: dict[str, Decision], want: dict[str, Decision]
) -> None:
    """Fail with :func:`decision_differences` alone: pytest's diff of the two dicts of
    decisions came after it and filled the tail of CI's output, the only part CI keeps."""
    if got != want:
        pytest.fail(decision_differences(pipeline, client, got, want), pytrace=False)


def check_republished(settings: Settings, on_topic: list[Decision], want: dict) -> int:
    """How many decisions went on the control topic more than once, checked against what
    the guarantee allows: none exactly once with transactional control delivery; with
    immediate delivery (a crash before the commit decides the events again) or at least
    once, only copies equal to the decision the gateways and the audit trail keep."""
    counts = Counter(d.decision_id for d in on_topic)
    assert set(counts) == set(want)
    republished = sum(counts.values()) - len(counts)
    print(f"decisions published more than once: {republished}")
    if settings.processing_guarantee == "exactly_once" and (
        settings.control_delivery == "transactional"
    ):
        assert republished == 0, "exactly once, transactional: a decision twice on the topic"
    assert all(d == want[d.decision_id] for d in on_topic), "a copy differs from its decision"
    return republished


@pytest.fixture
def pipeline_factory(
    broker: EmbeddedBroker | KafkaClusterBroker, tmp_path: Path
) -> Iterator[Callable[..., Pipeline]]:
    """Build isolated pipelines: ``pipeline_factory(db_url, config=..., partitions=...)``."""
    made: list[Pipeline] = []

    def make(db_url: str, **options: Any) -> Pipeline:
        pipeline = Pipeline(broker, db_url, tmp_path, **options).setup()
        made.append(pipeline)
        return pipeline

    yield make
    for pipeline in made:
        pipeline.close()


@pytest.fixture
def running_pipeline(
    pipeline_factory: Callable[..., Pipeline], migrated_db_url: str
) -> Iterator[tuple[Pipeline, GatewayClient]]:
    """One worker with loop detection enabled, ready, and a gateway client attached."""
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    # In time: before_tool waits until the worker has processed the run so far, so decisions
    # land on the cycles the pure core says, whatever the broker's latency.
    yield pipeline, pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)


@pytest.fixture
def migrated_db_url(db_url: str) -> str:
    with AuditStore(db_url) as store:
        store.migrate()
    return db_url
