"""Issue 40 items 2 and 4 within the gateways' ACLs (the secured KRaft cluster of
tests/integration/test_config_acl.py, the ACLs of streams/kafka/acls.py that compose/ creates).

Authenticated as the `gateway` principal, an attacker may write the events topic: its 40 calls
and RunEnded at the victim's next seqs, unsigned under the victim's gateway id or signed with its
own key, leave the victim's loop refused and aborted at the same calls as an unattacked loop.
The control topic it may only read: a forged decision is refused by the broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError
from services import FAST_GROUP_ENV, IN_TIME_BUDGET_MS, sasl_env, secured_fleet
from test_gateway_identity import (
    ATTACKER_KEY,
    CALLS,
    KEYS,
    VICTIM_KEY,
    drive_loop,
    forged_decisions,
    injected,
)

from streams.devtools.worker_process import WorkerProcess, wait_until_processing
from streams.gateway.client import GatewayClient
from streams.wire.avro import encode_decision, encode_event
from streams.wire.signing import KeyRing

pytestmark = [pytest.mark.integration, pytest.mark.broker("kafka")]


def test_a_gateway_principal_can_neither_stop_nor_blind_another_gateways_run(
    sasl_kafka_cluster, migrated_db_url: str, tmp_path: Path
) -> None:
    cluster = sasl_kafka_cluster
    fleet = secured_fleet(cluster, migrated_db_url)
    broker_url, prefix, topics = fleet.broker_url, fleet.prefix, fleet.topics
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
            "LOOPGUARD_GATEWAY_KEYS": json.dumps(KEYS),
            **sasl_env("worker"),
        },
    ).start()
    gateway_options = fleet.as_user("gateway").kafka_client_options()
    victim = GatewayClient(
        cluster.sasl_bootstrap,
        "gw-victim",
        topics=topics,
        wait_budget_ms=IN_TIME_BUDGET_MS,
        signing_keys=VICTIM_KEY,
        **gateway_options,
    )
    attacker = KafkaProducer(
        bootstrap_servers=cluster.sasl_bootstrap, max_block_ms=10_000, **gateway_options
    )
    try:
        try:
            wait_until_processing(victim, timeout=120, workers=[worker])
        except Exception:
            print(worker.log_path.read_text(errors="replace")[-6000:])  # type: ignore[union-attr]
            raise
        baseline = drive_loop(victim.start_run("support-bot"))
        assert baseline[0] and baseline[1] is not None, baseline

        run = victim.start_run("support-bot")
        victim.flush()
        ring = KeyRing.of(ATTACKER_KEY)
        for events, signer in (
            (injected(run, "gw-victim", run.seq + 1, CALLS), None),
            (injected(run, "gw-attacker", run.seq + 1, CALLS), ring),
        ):
            for event in events:
                value = encode_event(event)
                headers = signer.headers(value) if signer is not None else None
                attacker.send(topics.events, key=run.run_id.encode(), value=value, headers=headers)
        attacker.flush(timeout=20)
        assert drive_loop(run) == baseline

        # The control topic is the workers' to write: a forged decision is refused outright.
        forged = encode_decision(forged_decisions(run)[0])
        with pytest.raises(TopicAuthorizationFailedError):
            attacker.send(topics.control, key=run.run_id.encode(), value=forged).get(timeout=20)
    finally:
        attacker.close(timeout=5)
        victim.close()
        worker.stop()
