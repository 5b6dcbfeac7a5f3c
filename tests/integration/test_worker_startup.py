"""A worker creates or verifies its topics before guarding, and refuses broken layouts."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from services import ENABLED, Pipeline

from streams.core.events import Action
from streams.gateway.client import RunAborted
from streams.kafka.topics import topic_specs

pytestmark = pytest.mark.integration


def partition_counts(bootstrap: str, names: list[str]) -> dict[str, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {t["name"]: len(t["partitions"]) for t in admin.describe_topics(names)}
    finally:
        admin.close()


def test_a_worker_on_a_bare_broker_creates_its_topics_and_guards(broker, tmp_path, db_url):
    pipeline = Pipeline(broker, db_url, tmp_path, config=ENABLED, partitions=3)  # no setup()
    try:
        client = pipeline.start_ready()
        names = [spec.name for spec in topic_specs(pipeline.settings)]
        counts = partition_counts(broker.bootstrap, names)
        assert counts == {spec.name: spec.num_partitions for spec in topic_specs(pipeline.settings)}
        run = client.start_run("agent-startup")
        with contextlib.suppress(RunAborted):  # the loop may well be aborted in time
            for _ in range(25):
                if run.before_tool("read", {"path": "same.txt"}).allowed:
                    run.after_tool("read", {"path": "same.txt"}, result={"text": "same"})
        run.end()
        client.wait_for(run.run_id, lambda ds: any(d.action is Action.BLOCK for d in ds), 60)
        # once recovery was done, its start-up objects left the collector's full scans
        log_path = pipeline.workers[0].log_path
        assert log_path is not None
        log_text = log_path.read_text(errors="replace")
        assert "start-up objects out of the garbage collector's scans" in log_text
    finally:
        pipeline.close()


def test_a_worker_refuses_topics_that_are_not_co_partitioned(broker, tmp_path, db_url):
    pipeline = Pipeline(broker, db_url, tmp_path, partitions=4)
    specs = topic_specs(pipeline.settings)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics(
            [
                NewTopic(s.name, 2 if s.name == pipeline.settings.topics.control else 4, 1)
                for s in specs
            ]
        )
    finally:
        admin.close()
    done = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "streams.cli.main",
            "worker",
            "--broker",
            broker.url,
            "--db",
            db_url,
            "--app-id",
            pipeline.prefix,
            "--topic-prefix",
            pipeline.prefix,
            "--partitions",
            "4",
            "--broker-profile",
            broker.profile,
            "--data-dir",
            str(Path(tmp_path, "data")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"topic {pipeline.settings.topics.control} has 2 partitions" in lines[0]
    # Refused before the Faust app was built: no table state, no consumer group joined.
    assert not Path(tmp_path, "data").exists()
