"""The baselines of ``bench/throughput_bench.py``: processes that do nothing else.

* ``aiokafka``: a bare aiokafka consume → produce loop (what a Python Kafka consumer can do
  on this machine);
* ``faust``: a Faust app built like the worker (``build_app``, the same Faust patches, broker
  profile and group settings) with one agent that only forwards (Faust's own cost);
* ``faustconsume``: the same Faust app with one agent that only takes the events in, in the
  worker's batches (``streams.worker.ready_batches.take_ready``), acks them and sends
  nothing: the least any Faust agent that reads every record as an event can cost, so the
  ceiling of the worker's events/s on this machine;
* ``echo`` (``bench/fleet_bench.py --worker echo``): a bare aiokafka loop that answers each
  fetched batch at once with its runs' watermarks on the control topic (the worker's
  ``RunWatermarks`` record) and decides nothing: the shortest path any worker can give a
  gateway's wait on this machine;
* ``faustecho`` (``--worker faustecho``): the same answers from one Faust agent built like
  the worker's guarding agent (``take_ready`` batches): Faust's share of that path.

The first two read ``<prefix>.events`` and write every record, same key and value, to
``<prefix>.forward``. They run as a child process, like a worker, and take the worker's
``LOOPGUARD_*`` environment (broker, profile, app id = consumer group, topic prefix, session
timeouts, commit interval, fetch wait; the bench sets 16 KB producer batches), so a
difference in figures is the cost of what loopguard does on top, not of other settings:

    LOOPGUARD_BROKER=kafka://127.0.0.1:9092 python bench/forwarders.py KIND

where KIND is aiokafka, faust, faustconsume, echo or faustecho.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from streams.settings import Settings


def forward_topic(settings: Settings) -> str:
    return f"{settings.topics.events.rsplit('.', 1)[0]}.forward"


def events_consumer(settings: Settings, **options: Any) -> Any:
    """An aiokafka consumer of the events topic in the worker's group, with its fetch wait
    and group timeouts, from the earliest offset; ``options`` add to or override those."""
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(
        settings.topics.events,
        **{
            "bootstrap_servers": settings.bootstrap_servers,
            "group_id": settings.app_id,
            "auto_offset_reset": "earliest",
            "fetch_max_wait_ms": settings.fetch_max_wait_ms,
            "session_timeout_ms": int(settings.session_timeout * 1000),
            "heartbeat_interval_ms": int(settings.heartbeat_interval * 1000),
            "rebalance_timeout_ms": int(settings.rebalance_timeout * 1000),
            **options,
        },
    )


def raw_topic(app: Any, name: str) -> Any:
    """A Faust topic of raw bytes, keys and values."""
    return app.topic(
        name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )


def faust_app(settings: Settings) -> Any:
    """A Faust app built like the worker's (``build_app``, the same Faust patches)."""
    from streams.worker.bootstrap import apply_faust_patches, build_app

    apply_faust_patches(settings, asyncio.Lock())  # the barrier only orders exactly-once commits
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    return build_app(settings)


def run_faust_app(app: Any) -> None:
    sys.argv = ["forwarders", "worker", "-l", "warn", "--without-web"]
    app.main()


async def aiokafka_forward(settings: Settings) -> None:
    """Fetch in batches, send each record; every ``commit_interval`` wait for the sends so far
    to be acknowledged and commit their offsets (at least once, as the Faust apps commit)."""
    from aiokafka import AIOKafkaProducer

    interval = settings.commit_interval
    consumer = events_consumer(settings, enable_auto_commit=False)
    # acks=all as Faust's producer; aiokafka's own batching (16 KB), whatever the profile.
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    out = forward_topic(settings)
    await producer.start()
    await consumer.start()
    loop = asyncio.get_running_loop()
    pending: dict = {}  # TopicPartition -> (last send's future, offset to commit)
    committed_at = loop.time()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=int(interval * 1000), max_records=10_000)
            for tp, records in batches.items():
                for record in records:
                    sent = await producer.send(out, record.value, key=record.key)
                pending[tp] = (sent, records[-1].offset + 1)
            if pending and loop.time() - committed_at >= interval:
                await asyncio.gather(*(sent for sent, _ in pending.values()))
                await consumer.commit({tp: offset for tp, (_, offset) in pending.items()})
                pending.clear()
                committed_at = loop.time()
    finally:
        await consumer.stop()
        await producer.stop()


def echo_watermarks(values: Iterable[bytes]) -> list[bytes]:
    """The control records that answer a fetched batch of encoded events: one watermark per
    run, at its highest seq in the batch, packed as the worker packs them (RunWatermarks)."""
    from streams.wire.avro import RunWatermark, decode_event, encode_watermark_chunks

    marks: dict[str, RunWatermark] = {}
    for value in values:
        envelope = decode_event(value).envelope
        seen = marks.get(envelope.run_id)
        if seen is None or envelope.seq > seen.seq:
            marks[envelope.run_id] = RunWatermark(
                run_id=envelope.run_id,
                agent_id=envelope.agent_id,
                gateway_id=envelope.gateway_id,
                seq=envelope.seq,
                event_time=envelope.event_time,
            )
    return encode_watermark_chunks(list(marks.values())) if marks else []


async def aiokafka_echo(settings: Settings) -> None:
    """Fetch events in batches and send each batch's watermarks before the next fetch: no
    detection, no state, no audit trail, no transaction. aiokafka's auto-commit commits the
    offsets every ``commit_interval``, off the answer's path (a floor to measure against,
    not a guarantee: it may commit before the watermarks are acknowledged)."""
    from aiokafka import AIOKafkaProducer

    consumer = events_consumer(
        settings,
        enable_auto_commit=True,
        auto_commit_interval_ms=int(settings.commit_interval * 1000),
    )
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    await producer.start()
    await consumer.start()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            values = [record.value for records in batches.values() for record in records]
            for value in echo_watermarks(values):
                await producer.send(settings.topics.control, value)
    finally:
        await consumer.stop()
        await producer.stop()


def faust_forward(settings: Settings) -> None:
    """One Faust agent: ``async for key, value in stream.items(): await out.send(...)``."""
    app = faust_app(settings)
    source, sink = raw_topic(app, settings.topics.events), raw_topic(app, forward_topic(settings))

    async def forward(stream) -> None:  # faust.StreamT
        async for key, value in stream.items():
            await sink.send(key=key, value=value)

    app.agent(source, name="forward")(forward)
    run_faust_app(app)


def faust_consume(settings: Settings) -> None:
    """One Faust agent: ``async for batch in take_ready(stream, ...)``, then ack its events."""
    from streams.worker.ready_batches import take_ready

    app = faust_app(settings)
    source = raw_topic(app, settings.topics.events)

    async def consume(stream) -> None:  # faust.StreamT
        async for batch in take_ready(stream, settings.batch_size, settings.batch_window):
            for event in batch:
                await stream.ack(event)

    app.agent(source, name="consume")(consume)
    run_faust_app(app)


def faust_echo(settings: Settings) -> None:
    """The echo as one Faust agent built like the worker's (``take_ready`` batches, at least
    once): Faust's share of the answer's path, without loopguard's work."""
    from streams.worker.ready_batches import take_ready

    app = faust_app(settings)
    source, control = (
        raw_topic(app, settings.topics.events),
        raw_topic(app, settings.topics.control),
    )

    async def echo(stream) -> None:  # faust.StreamT
        async for batch in take_ready(stream, settings.batch_size, settings.batch_window):
            for value in echo_watermarks([event.message.value for event in batch]):
                await control.send(value=value)
            for event in batch:
                await stream.ack(event)

    app.agent(source, name="echo")(echo)
    run_faust_app(app)


def main() -> int:
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    settings = Settings.from_env()
    if kind == "aiokafka":
        asyncio.run(aiokafka_forward(settings))
        return 0
    if kind == "echo":
        asyncio.run(aiokafka_echo(settings))
        return 0
    if kind == "faustecho":
        faust_echo(settings)
        return 0
    if kind == "faust":
        faust_forward(settings)
        return 0
    if kind == "faustconsume":
        faust_consume(settings)
        return 0
    print(__doc__, file=sys.stderr)
    return 2
