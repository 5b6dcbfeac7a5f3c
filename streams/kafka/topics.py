"""Create loopguard's topics up front with explicit partitions and cleanup policies.

Faust would declare them lazily; creating them first means gateways can attach to the
control topic before any worker has started, and the partition counts are the operator's
choice rather than a side effect. Used by the worker, the demo, the tests and compose.
"""

from __future__ import annotations

import logging
import time

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from streams.settings import Settings, redact_urls

log = logging.getLogger("loopguard.topics")


def topic_specs(settings: Settings) -> list[NewTopic]:
    """Every topic the app reads or writes, with its partitions and topic configs."""
    parts, repl = settings.partitions, settings.replication
    # With replicas, an acknowledged write must be on at least min.insync.replicas of them.
    durable = {"min.insync.replicas": str(settings.min_insync_replicas)} if repl > 1 else {}
    compacted = {**durable, "cleanup.policy": "compact"}
    events_size = {"max.message.bytes": str(2 * settings.max_message_bytes)}
    return [
        # Events up to twice the worker's limit reach it, so an oversized one is dead-lettered
        # (and audited) instead of failing in the gateway's producer.
        NewTopic(settings.topics.events, parts, repl, topic_configs={**durable, **events_size}),
        NewTopic(settings.topics.control, parts, repl, topic_configs=durable),
        NewTopic(settings.topics.deadletter, parts, repl, topic_configs=durable),
        NewTopic(settings.topics.config, 1, repl, topic_configs=compacted),
        NewTopic(settings.topics.schemas, 1, repl, topic_configs=compacted),
        NewTopic(f"{settings.app_id}-runs-changelog", parts, repl, topic_configs=compacted),
        NewTopic(f"{settings.app_id}-sessions-changelog", parts, repl, topic_configs=compacted),
        # Loop incidents (issue 28, streams/worker/incidents.py): signals keyed by signature,
        # the incident tables' changelogs on the same partitions, and the incidents.
        NewTopic(settings.topics.incident_signals, parts, repl, topic_configs=durable),
        NewTopic(
            f"{settings.app_id}-incident-tallies-changelog", parts, repl, topic_configs=compacted
        ),
        NewTopic(
            f"{settings.app_id}-incidents-open-changelog", parts, repl, topic_configs=compacted
        ),
        NewTopic(settings.topics.incidents, parts, repl, topic_configs=durable),
        # Loops between agents (issue 28, streams/worker/agent_cycles.py): send calls keyed by
        # chain id or gateway, and the graphs table's changelog on the same partitions.
        NewTopic(settings.topics.agent_sends, parts, repl, topic_configs=durable),
        NewTopic(f"{settings.app_id}-agent-cycles-changelog", parts, repl, topic_configs=compacted),
    ]


def admin_client(settings: Settings, timeout: float) -> KafkaAdminClient:
    """An admin client that gives up on a broker that does not answer within ``timeout`` s."""
    return KafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers,
        client_id="loopguard-admin",
        **{
            **settings.kafka_client_options(),
            "bootstrap_timeout_ms": max(100, int(timeout * 1000)),
        },
    )


def connect_admin(settings: Settings, deadline: float) -> KafkaAdminClient:
    """An admin client, retried while the broker starts, until ``deadline`` (monotonic)."""
    while True:
        try:
            return admin_client(settings, deadline - time.monotonic())
        except KafkaError as exc:
            if time.monotonic() > deadline:
                shown = redact_urls(settings.broker)
                raise RuntimeError(f"broker {shown} unreachable: {exc}") from None
            time.sleep(0.2)


def ensure_topics(settings: Settings, timeout: float = 30.0) -> list[str]:
    """Create missing topics; returns the names created. Retries while the broker starts."""
    admin = connect_admin(settings, time.monotonic() + timeout)
    try:
        existing = set(admin.list_topics())
        created = []
        for spec in topic_specs(settings):
            if spec.name in existing:
                continue
            try:
                admin.create_topics([spec])
                created.append(spec.name)
            except TopicAlreadyExistsError:
                pass
        if created:
            log.info("created topics: %s", ", ".join(created))
        return created
    finally:
        admin.close()


def create_like(settings: Settings, name: str, model: str, timeout: float = 10.0) -> bool:
    """Create topic ``name`` with the partitions and replication of topic ``model`` unless it
    exists; for topics outside the app's layout (``replay --publish-to``) on brokers that do
    not create topics on first use. Returns whether it was created."""
    admin = admin_client(settings, timeout)
    try:
        if name in set(admin.list_topics()):
            return False
        (described,) = admin.describe_topics([model])
        partitions = described["partitions"]
        replicas = len(partitions[0]["replica_nodes"]) if partitions else 1
        durable = {"min.insync.replicas": str(settings.min_insync_replicas)} if replicas > 1 else {}
        try:
            admin.create_topics(
                [NewTopic(name, len(partitions) or 1, replicas, topic_configs=durable)]
            )
        except TopicAlreadyExistsError:
            return False
        return True
    finally:
        admin.close()


def partition_counts(settings: Settings, names: list[str], timeout: float) -> dict[str, int]:
    """Partitions per topic; waits (until ``timeout``) for topics just created to show up in
    the brokers' metadata. A topic that never does is left out."""
    deadline = time.monotonic() + timeout
    while True:
        admin = connect_admin(settings, deadline)
        try:
            described = admin.describe_topics(names)
        finally:
            admin.close()
        counts = {t["name"]: len(t["partitions"]) for t in described if not t.get("error_code")}
        if set(names) <= set(counts) or time.monotonic() > deadline:
            return counts
        time.sleep(0.2)


def all_partitions(consumer: KafkaConsumer, topic: str, wait: float = 0.0) -> list[TopicPartition]:
    """Every partition of ``topic``, sorted, for a group-less consumer to ``assign``.

    Metadata is refreshed at least once (the topic may be new to this client) and then
    every 0.2 s for up to ``wait`` seconds; an empty list means the topic is not there.
    """
    deadline = time.monotonic() + wait
    partitions = consumer.partitions_for_topic(topic)
    while not partitions:
        consumer.topics()  # refresh metadata
        partitions = consumer.partitions_for_topic(topic)
        if partitions or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    return [TopicPartition(topic, p) for p in sorted(partitions or ())]
