"""The control plane on a secured cluster (issue 26 item 4): a KRaft cluster with a SCRAM-SHA-512
listener, the StandardAuthorizer and the ACLs of streams/kafka/acls.py (those compose/ creates).

A gateway principal's ``loopguard config set`` is refused (TopicAuthorizationFailed), and so is
a config write by the worker principal; the admin's change is applied by a running worker that
authenticates as the worker principal, and recorded in SQL with its sender, the principal
included, as ``loopguard config history --json`` shows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError
from services import FAST_GROUP_ENV, sasl_env, secured_fleet

from streams.audit.config_changes import config_history
from streams.audit.store import AuditStore
from streams.cli.main import main
from streams.devtools.worker_process import WorkerProcess, wait_until_processing
from streams.gateway.client import GatewayClient

pytestmark = [pytest.mark.integration, pytest.mark.broker("kafka")]

TUNED = {"enabled": True, "warningThreshold": 3}


def test_only_the_admin_writes_config_and_its_change_is_recorded_with_its_principal(
    sasl_kafka_cluster, migrated_db_url: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    cluster = sasl_kafka_cluster
    fleet = secured_fleet(cluster, migrated_db_url)
    broker_url, prefix, topics = fleet.broker_url, fleet.prefix, fleet.topics

    block = tmp_path / "tuned.json"
    block.write_text(json.dumps(TUNED))
    cli = ["--file", str(block), "--broker", broker_url, "--topic-prefix", prefix]

    # A gateway may write events, not the config.
    for key, value in sasl_env("gateway").items():
        monkeypatch.setenv(key, value)
    assert main(["config", "set", "*", *cli]) == 1
    err = capsys.readouterr().err
    assert "TopicAuthorizationFailed" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1

    # Nor may a worker: its ALLOW on the fleet's prefix is beaten by a DENY on the config topic.
    producer = KafkaProducer(
        bootstrap_servers=cluster.sasl_bootstrap,
        max_block_ms=10_000,
        **fleet.as_user("worker").kafka_client_options(),
    )
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topics.config, key=b"*", value=b'{"enabled": false}').get(timeout=20)
    finally:
        producer.close(timeout=5)

    # A worker authenticated as the worker principal guards (a gateway principal's loop is
    # answered).
    config_file = tmp_path / "loopguard.json"
    config_file.write_text(json.dumps({"tools": {"loopDetection": {"enabled": True}}}))
    worker = WorkerProcess(
        broker_url,
        migrated_db_url,
        app_id=prefix,
        profile="kafka",
        log_path=tmp_path / "worker.log",
        config_file=str(config_file),
        partitions=2,
        data_dir=str(tmp_path / "data"),
        env={
            **FAST_GROUP_ENV,
            "LOOPGUARD_TOPIC_PREFIX": prefix,
            "LOOPGUARD_REPLICATION": "1",
            "LOOPGUARD_MIN_INSYNC_REPLICAS": "1",
            **sasl_env("worker"),
        },
    ).start()
    client = GatewayClient(
        cluster.sasl_bootstrap,
        "gw-sasl",
        topics=topics,
        **fleet.as_user("gateway").kafka_client_options(),
    )
    try:
        try:
            wait_until_processing(client, timeout=120, workers=[worker])
        except Exception:
            print(worker.log_path.read_text(errors="replace")[-6000:])  # type: ignore[union-attr]
            raise

        # The admin's change is applied by the running worker...
        for key, value in sasl_env("admin").items():
            monkeypatch.setenv(key, value)
        assert main(["config", "set", "tuned", *cli]) == 0
        capsys.readouterr()
        log = worker.log_path
        assert log is not None

        def applied() -> bool:
            return "config override for tuned applied (from User:admin" in log.read_text()

        def recorded() -> list:
            with AuditStore(migrated_db_url) as store:
                return config_history(store, agent="tuned")

        deadline = time.monotonic() + 60
        while not (applied() and recorded()):
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-6000:]
            time.sleep(0.1)
    finally:
        client.close()
        worker.stop()

    # ...and recorded with its sender, the SASL principal included.
    (change,) = recorded()
    assert (change.principal, change.source, change.action) == ("User:admin", "cli", "set")
    assert json.loads(change.value or "") == TUNED
    assert change.version_before != change.version_after
    assert main(["config", "history", "--db", migrated_db_url, "--json", "--agent", "tuned"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["principal"] == "User:admin" and row["change_id"] == change.change_id
