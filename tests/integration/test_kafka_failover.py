"""Fault: Apache Kafka brokers crash and restart under load; nothing is lost or doubled.

On the 3-node KRaft cluster (replication 3, min.insync.replicas 2): one broker is SIGKILLed
while gateways publish, later restarted, then all three are restarted one after the other.
The worker and the gateway client must carry on by themselves; every decision the pure core
expects arrives (exactly once on the control topic, read committed, when the worker runs
exactly_once), each once at the gateway and in the audit trail. (Restarts of the embedded
tansu broker: test_broker_restart.py.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from services import (
    ENABLED,
    KafkaClusterBroker,
    Pipeline,
    assert_same_decisions,
    check_republished,
    control_topic_decisions,
)
from test_reliability import expected, looping_run, wait_for_decisions

from streams.audit.store import AuditStore

# It kills and restarts nodes: a cluster of its own, never the one other tests share.
pytestmark = [pytest.mark.integration, pytest.mark.broker("kafka")]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_broker_crash_and_a_rolling_restart_lose_and_double_nothing(
    private_kafka_cluster, migrated_db_url: str, tmp_path: Path
) -> None:
    pipeline = Pipeline(
        KafkaClusterBroker(private_kafka_cluster), migrated_db_url, tmp_path, config=ENABLED
    ).setup()
    try:
        client = pipeline.start_ready()
        run_ids = [f"failover-run-{i}" for i in range(8)]
        per_run = {run_id: looping_run(run_id, 40) for run_id in run_ids}
        interleaved = [e for events in zip(*per_run.values(), strict=True) for e in events]
        want = expected(interleaved)
        published = threading.Event()

        def publish() -> None:  # a steady load of runs, as gateways would send it
            for n, event in enumerate(interleaved):
                client.publish(event)
                if n % 10 == 0:
                    client.flush()
                    time.sleep(0.05)
            client.flush()
            published.set()

        def decided() -> int:
            return sum(len(client.decisions(r)) for r in run_ids)

        def progress_after(before: int, what: str) -> None:
            deadline = time.monotonic() + 120
            while decided() <= before and not published.is_set():
                assert time.monotonic() < deadline, f"no decision after {what}"
                time.sleep(0.2)

        feeder = threading.Thread(target=publish)
        feeder.start()
        progress_after(0, "start")
        private_kafka_cluster.kill(1)  # SIGKILL: nothing flushed, no connection closed
        progress_after(decided(), "a broker crash")
        private_kafka_cluster.start_node(1)
        private_kafka_cluster.rolling_restart()
        feeder.join()
        assert published.is_set()

        got = wait_for_decisions(client, run_ids, len(want))
        assert_same_decisions(pipeline, client, got, want)
        on_topic = control_topic_decisions(
            pipeline.broker.bootstrap, pipeline.settings.topics.control, set(run_ids)
        )
        check_republished(pipeline.settings, on_topic, want)

        with AuditStore(migrated_db_url) as store:
            deadline = time.monotonic() + 60
            while True:
                rows = [d for r in run_ids for d in store.history(r)]
                if len(rows) >= len(want) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        assert {d.decision_id: d for d in rows} == want
        assert len(rows) == len(want)
    finally:
        pipeline.close()
