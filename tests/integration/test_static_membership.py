"""Static group membership (LOOPGUARD_GROUP_INSTANCE_ID, what the Helm chart sets to the pod
name) on the 3-node Kafka cluster: the worker joins the group under that group.instance.id,
stays in the group when it stops (a static member sends no LeaveGroup: its partitions wait for
its session to time out or for it to come back), and a worker started again under the same
name takes its place and guards the runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from services import ENABLED, KafkaClusterBroker, Pipeline

from streams.kafka.topics import admin_client

pytestmark = [pytest.mark.integration, pytest.mark.broker("kafka")]

# Long enough that the stopped member is still in the group when the test looks.
STATIC_ENV = {"LOOPGUARD_SESSION_TIMEOUT": "30", "LOOPGUARD_HEARTBEAT_INTERVAL": "1"}


def members(pipeline: Pipeline) -> list[dict[str, Any]]:
    """The consumer group's members, as DescribeGroups reports them."""
    admin = admin_client(pipeline.settings, timeout=10)
    try:
        group = admin.describe_groups([pipeline.prefix])[pipeline.prefix]
    finally:
        admin.close()
    assert group["error"] is None, group
    return list(group["members"])


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_static_member_keeps_its_name_across_a_restart(
    kafka_cluster, migrated_db_url: str, tmp_path: Path
) -> None:
    pipeline = Pipeline(
        KafkaClusterBroker(kafka_cluster), migrated_db_url, tmp_path, config=ENABLED
    ).setup()
    name = f"{pipeline.prefix}-worker-0"
    try:
        first = pipeline.start_worker(LOOPGUARD_GROUP_INSTANCE_ID=name, **STATIC_ENV)
        client = pipeline.client()
        pipeline.wait_ready(client)
        (joined,) = members(pipeline)
        assert joined["group_instance_id"] == name

        first.stop()  # SIGTERM: a clean stop, which a static member does not announce
        assert not first.alive
        (kept,) = members(pipeline)
        assert (kept["group_instance_id"], kept["member_id"]) == (name, joined["member_id"])

        pipeline.workers.remove(first)
        pipeline.start_worker(LOOPGUARD_GROUP_INSTANCE_ID=name, **STATIC_ENV)
        pipeline.wait_ready(client)  # a new looping run is caught: the worker guards again
        (rejoined,) = members(pipeline)
        assert rejoined["group_instance_id"] == name
        assert rejoined["member_id"] != joined["member_id"]
    except Exception:
        print(pipeline.worker_logs())
        raise
    finally:
        pipeline.close()
