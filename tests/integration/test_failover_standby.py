"""Failover with a standby replica (issue 26, item 8): a SIGKILLed worker's runs are guarded on.

On the 3-node Kafka cluster, with the kafka profile's defaults (one table standby replica,
exactly once): two workers of one app, each active for half the partitions and standby for
the other half; a few thousand open runs are loaded, two looping runs are warned (one on each
worker), then the second worker is SIGKILLed. The survivor must take its partitions over with
the runs' states (each warned run goes on to its block at the call the pure core says, not to a
fresh warning: the one that moved and the one whose partition the survivor kept without reading
it again), guard a new looping run there, and have started its recovery from its standby copy,
not from the start of the changelog. How long it took is bench/failover_bench.py's job.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.partitioner.default import murmur2
from services import ENABLED, KafkaClusterBroker, Pipeline, assert_same_decisions
from test_reliability import expected, looping_run, wait_for_decisions

from streams.core.events import Action, Envelope, RunStarted, ToolCall, ToolResult
from streams.devtools.worker_process import WorkerProcess
from streams.wire.avro import encode_event

pytestmark = [pytest.mark.integration, pytest.mark.broker("kafka")]

PARTITIONS = 4
HELD_RUNS = 2000
ASSIGNED = "events partitions assigned to this worker: "
STANDBY_USED = "was a standby here: recovery starts at"


def partition_of(run_id: str) -> int:
    return (murmur2(run_id.encode()) & 0x7FFFFFFF) % PARTITIONS


def owned(worker: WorkerProcess) -> list[int]:
    """The events partitions named by the worker's latest assignment line."""
    assert worker.log_path is not None
    text = worker.log_path.read_text(errors="replace") if worker.log_path.exists() else ""
    lines = [line.split(ASSIGNED, 1)[1] for line in text.splitlines() if ASSIGNED in line]
    latest = lines[-1].strip() if lines else "[]"
    return [int(p) for p in latest.strip("[]").split(",") if p.strip()]


def wait_until(condition, what: str, pipeline: Pipeline, watch: list[WorkerProcess]) -> None:
    """Poll ``condition`` (a worker's log, mostly) until true; the watched workers must live."""
    deadline = time.monotonic() + 120
    while not condition():
        dead = [w.log_path for w in watch if not w.alive]
        assert not dead, f"a worker died: {dead}\n{pipeline.worker_logs()}"
        assert time.monotonic() < deadline, f"not within 120 s: {what}\n{pipeline.worker_logs()}"
        time.sleep(0.2)


def held_run(run_id: str) -> list:
    """An open run: started, one ordinary tool cycle, never ended."""
    return [
        RunStarted(Envelope(run_id, "coder", "gw-test", 1, 1)),
        ToolCall(Envelope(run_id, "coder", "gw-test", 2, 2), "read_file", f'{{"p":"{run_id}"}}'),
        ToolResult(
            Envelope(run_id, "coder", "gw-test", 3, 3), "read_file", f'{{"p":"{run_id}"}}', '"x"'
        ),
    ]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_standby_takes_over_a_killed_worker_with_its_runs_state(
    kafka_cluster, migrated_db_url: str, tmp_path: Path
) -> None:
    pipeline = Pipeline(
        KafkaClusterBroker(kafka_cluster),
        migrated_db_url,
        tmp_path,
        config=ENABLED,
        partitions=PARTITIONS,
    ).setup()
    producer = None
    try:
        assert pipeline.settings.table_standby_replicas == 1  # the kafka profile's default
        client = pipeline.start_ready()
        pipeline.start_worker()
        wait_until(
            lambda: (
                all(owned(w) for w in pipeline.workers)
                and sorted(p for w in pipeline.workers for p in owned(w)) == list(range(PARTITIONS))
            ),
            "both workers own partitions",
            pipeline,
            pipeline.workers,
        )

        producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap, linger_ms=5)
        events_topic = pipeline.settings.topics.events
        for i in range(HELD_RUNS):
            run_id = f"held-{i:05d}"
            for event in held_run(run_id):
                producer.send(events_topic, key=run_id.encode(), value=encode_event(event))
        producer.flush()

        # Two warned runs, one on a partition of the second worker (started without the canary,
        # the one killed: its runs move), one on a partition the first keeps; each published up
        # to its first warning, the rest after the kill.
        victim, survivor = pipeline.workers[1], pipeline.workers[0]
        victim_partitions = owned(victim)
        warned = [
            next(r for i in range(1000) if partition_of(r := f"{name}-{i}") in partitions)
            for name, partitions in (
                ("warned-moved", victim_partitions),
                ("warned-kept", owned(survivor)),
            )
        ]
        events = [e for run_id in warned for e in looping_run(run_id, 22)]  # blocked at 21, 22
        want = expected(events)
        warn_seq = min(d.seq for d in want.values() if d.action is Action.WARN)
        block_seq = min(d.seq for d in want.values() if d.action is Action.BLOCK)
        assert warn_seq < block_seq
        for event in events:
            if event.envelope.seq <= warn_seq:
                client.publish(event)
        client.flush()
        before = [d for d in want.values() if d.seq <= warn_seq]
        got = wait_for_decisions(client, warned, len(before))
        assert set(got) == {d.decision_id for d in before}, pipeline.worker_logs()

        victim.kill()  # SIGKILL: no commit, no leaving the group
        wait_until(
            lambda: sorted(owned(survivor)) == list(range(PARTITIONS)),
            "the survivor owns every partition",
            pipeline,
            [survivor],
        )
        for event in events:
            if event.envelope.seq > warn_seq:
                client.publish(event)
        fresh = next(r for i in range(1000) if partition_of(r := f"fresh-{i}") in victim_partitions)
        fresh_events = looping_run(fresh, 22)
        for event in fresh_events:
            client.publish(event)
        client.flush()

        got = wait_for_decisions(client, warned, len(want))
        assert_same_decisions(pipeline, client, got, want)
        for run_id in warned:  # the states held: each run blocked at the core's call
            blocks = sorted(
                d.seq for d in got.values() if d.run_id == run_id and d.action is Action.BLOCK
            )
            assert blocks[0] == block_seq, run_id
        want_fresh = expected(fresh_events)
        assert wait_for_decisions(client, [fresh], len(want_fresh)) == want_fresh
        assert any(d.action is Action.BLOCK for d in want_fresh.values())

        assert survivor.log_path is not None
        log = survivor.log_path.read_text(errors="replace")
        assert STANDBY_USED in log, (
            "the survivor recovered without its standby copy\n" + log[-4000:]
        )
    finally:
        if producer is not None:
            producer.close()
        pipeline.close()
