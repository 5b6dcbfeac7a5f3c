#!/usr/bin/env python3
"""End-to-end check of cluster.py against real Kafka, with timings. Not collected by pytest.

    python tests/kafka_cluster/smoke.py [--nodes 3] [--keep]

Needs kafka-python and aiokafka (the project's venv has both). Steps: fetch, start, a topic
with RF 3 / min.insync.replicas 2, produce + consume, SIGKILL the leader and produce with
acks=all, restart it, a rolling restart under a steady acks=all producer (no acked record
lost), aiokafka transactions (commit, abort, send_offsets_to_transaction), stop.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_cluster_module():
    spec = importlib.util.spec_from_file_location("loopguard_kafka_cluster", HERE / "cluster.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def step(name: str, t0: float) -> float:
    now = time.monotonic()
    print(f"  {name:<58} {now - t0:6.1f} s", flush=True)
    return now


def _get(part: dict, *keys: str):  # kafka-python 3 renamed these fields
    return next(part[k] for k in keys if k in part)


def leader_of(admin, topic: str, partition: int = 0) -> int:
    for desc in admin.describe_topics([topic]):
        for part in desc["partitions"]:
            if _get(part, "partition_index", "partition") == partition:
                return _get(part, "leader_id", "leader")
    raise AssertionError(f"{topic}-{partition} not described")


def consume_all(bootstrap: str, topic: str, expect: int, timeout: float = 30.0) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level="read_committed")  # fmt: skip
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        # drain a little longer to catch extras (e.g. aborted records leaking)
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
        return got
    finally:
        consumer.close()


async def transactions(bootstrap: str, topic: str, source: str) -> dict[str, float]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    times: dict[str, float] = {}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{uuid.uuid4()}",
                                enable_idempotence=True, acks="all")  # fmt: skip
    t0 = time.monotonic()
    await producer.start()  # InitProducerId: creates __transaction_state on first use
    times["aiokafka transactional producer start (InitProducerId)"] = time.monotonic() - t0
    try:
        t0 = time.monotonic()
        async with producer.transaction():
            for n in range(10):
                await producer.send(topic, f"committed-{n}".encode())
        times["first transaction (10 records) committed"] = time.monotonic() - t0
        try:
            async with producer.transaction():
                for n in range(5):
                    await producer.send(topic, f"aborted-{n}".encode())
                raise RuntimeError("abort me")
        except RuntimeError:
            pass
        # consume-transform-produce with offsets committed in the transaction (Faust's EOS)
        group = f"eos-{uuid.uuid4().hex[:8]}"
        consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    isolation_level="read_committed")  # fmt: skip
        await consumer.start()
        try:
            t0 = time.monotonic()
            batch = await consumer.getmany(timeout_ms=10000, max_records=5)
            records = [r for rs in batch.values() for r in rs]
            assert records, "no source records"
            async with producer.transaction():
                for r in records:
                    await producer.send(topic, b"eos-" + r.value)
                offsets = {tp: rs[-1].offset + 1 for tp, rs in batch.items()}
                await producer.send_offsets_to_transaction(offsets, group)
            times["consume-transform-produce txn with send_offsets"] = time.monotonic() - t0
            # Offsets committed in a transaction show up once the commit markers are written,
            # a moment after commit returns (aiokafka's OffsetFetch has no require_stable).
            t0 = time.monotonic()
            want = offsets[TopicPartition(source, 0)]
            committed = None
            while committed != want and time.monotonic() - t0 < 15:
                committed = await consumer.committed(TopicPartition(source, 0))
                if committed != want:
                    await asyncio.sleep(0.1)
            assert committed == want, (committed, offsets)
            times["  ...its offsets visible to OffsetFetch"] = time.monotonic() - t0
        finally:
            await consumer.stop()
    finally:
        await producer.stop()
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the data dir for inspection")
    args = ap.parse_args()

    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    mod = load_cluster_module()
    data = Path(tempfile.mkdtemp(prefix="loopguard-kafka-smoke-"))
    cluster = mod.KafkaCluster(nodes=args.nodes, base_port=0, data_dir=data)
    print(f"Kafka {cluster.version}, {args.nodes} nodes, data {data}")
    t0 = time.monotonic()
    cluster.fetch()
    t0 = step("fetch (no-op when cached)", t0)
    cluster.start(timeout=180)
    t0 = step(f"start + ready: {cluster.bootstrap}", t0)
    for i, mb in cluster.rss_mb().items():
        print(f"  node {i} RSS {mb:.0f} MiB")
    try:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        topic = "smoke"
        admin.create_topics([NewTopic(topic, 3, 3, topic_configs={"min.insync.replicas": "2"})])
        t0 = step("create topic smoke (3 partitions, RF 3, min.insync 2)", t0)
        for part in admin.describe_topics([topic])[0]["partitions"]:
            replicas, isr = _get(part, "replica_nodes", "replicas"), _get(part, "isr_nodes", "isr")
            assert len(replicas) == 3 and len(isr) == 3, part

        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=20,
                                 linger_ms=5, request_timeout_ms=15000)  # fmt: skip
        for n in range(100):
            producer.send(topic, f"a-{n}".encode(), partition=n % 3)
        producer.flush(30)
        got = consume_all(cluster.bootstrap, topic, 100)
        assert len(got) == 100, len(got)
        t0 = step("produce 100 (acks=all) + consume 100", t0)

        victim = leader_of(admin, topic, 0)
        cluster.kill(victim)
        t0 = step(f"SIGKILL node {victim} (leader of smoke-0)", t0)
        fut = producer.send(topic, b"after-kill", partition=0)
        meta = fut.get(timeout=30)
        t0 = step(f"first acks=all send to smoke-0 after kill (offset {meta.offset})", t0)
        for n in range(100):
            producer.send(topic, f"b-{n}".encode(), partition=n % 3)
        producer.flush(30)
        t0 = step("100 more acks=all sends with a node down", t0)
        cluster.wait_ready(60)
        t0 = step("cluster settled on the live nodes (killed one fenced)", t0)
        got = consume_all(cluster.bootstrap, topic, 201)
        assert len(got) == 201, len(got)
        cluster.restart(victim)
        t0 = step(f"restart node {victim} until ready", t0)

        # rolling restart under a steady acks=all producer: no acknowledged record may be lost
        acked: list[bytes] = []
        errors: list[str] = []
        stop = threading.Event()

        def pump() -> None:
            n = 0
            while not stop.is_set():
                value = f"r-{n}".encode()
                try:
                    producer.send(topic, value, partition=n % 3).get(timeout=30)
                    acked.append(value)
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    errors.append(type(exc).__name__)
                n += 1
                time.sleep(0.02)

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        for i in range(args.nodes):
            t1 = time.monotonic()
            cluster.stop_node(i)
            t2 = time.monotonic()
            cluster.start_node(i)
            t3 = time.monotonic()
            print(f"    node {i}: stop {t2 - t1:.1f} s, start until ready {t3 - t2:.1f} s")
        stop.set()
        thread.join(60)
        t0 = step(f"rolling restart of {args.nodes} nodes under load ({len(acked)} acked)", t0)
        print(f"  producer errors during rolling restart: {len(errors)} {sorted(set(errors))}")
        got_set = set(consume_all(cluster.bootstrap, topic, 201 + len(acked)))
        lost = [v for v in acked if v not in got_set]
        assert not lost, f"{len(lost)} acked records lost: {lost[:5]}"
        t0 = step("all acknowledged records read back", t0)
        producer.close()

        # kafka-python's admin client caches the "controller" (in KRaft: a random broker)
        # and raises UnknownBrokerIdError once that node has restarted: use a new one.
        admin.close()
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic("tx-out", 1, 3), NewTopic("tx-in", 1, 3)])
        src = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        for n in range(5):
            src.send("tx-in", f"in-{n}".encode())
        src.flush()
        src.close()
        t0 = time.monotonic()
        for name, secs in asyncio.run(transactions(cluster.bootstrap, "tx-out", "tx-in")).items():
            print(f"  {name:<58} {secs:6.1f} s")
        values = consume_all(cluster.bootstrap, "tx-out", 15)
        assert sorted(values) == sorted(
            [f"committed-{n}".encode() for n in range(10)]
            + [f"eos-in-{n}".encode() for n in range(5)]
        ), values
        t0 = step("aiokafka transactions: commit, abort, read_committed ok", t0)
        admin.close()
        for i, mb in cluster.rss_mb().items():
            print(f"  node {i} RSS after the run {mb:.0f} MiB")
    finally:
        t0 = time.monotonic()
        cluster.stop()
        step("stop", t0)
        if not args.keep:
            import shutil

            shutil.rmtree(data, ignore_errors=True)
    print("smoke: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
