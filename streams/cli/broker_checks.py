"""Checks the CLI runs against a broker and the host before a worker starts (and ``doctor``
runs on demand): each answers in a second and is phrased as the flag that fixes it.

A worker that starts on a broker its profile does not fit, a web port someone else holds or
topics with another partition count fails deep inside Faust with a long traceback; these
checks say the same thing in one line before Faust is involved.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from streams.settings import Settings, redact_urls
from streams.worker.startup import quiet

PROBE_TIMEOUT = 5.0  # seconds; a reachable broker answers InitProducerId in milliseconds


def transactions_refusal(settings: Settings, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why the broker refuses a transactional producer (what exactly once needs), or None
    when it accepts one or cannot be reached (the topic check reports that in its words).

    aiokafka's own InitProducerId is what Faust's exactly-once producers send; the embedded
    tansu broker answers it with UnknownError."""
    # On a thread of its own: asyncio.run would leave the main thread without an event loop,
    # and the Faust worker started next takes the main thread's.
    with ThreadPoolExecutor(1, thread_name_prefix="loopguard-probe") as pool:
        probe = pool.submit(asyncio.run, asyncio.wait_for(_init_producer_id(settings), timeout))
        try:
            return probe.result()
        except TimeoutError:
            return None


async def _init_producer_id(settings: Settings) -> str | None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError, KafkaError

    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        transactional_id=f"loopguard-probe-{uuid.uuid4().hex[:12]}",
        request_timeout_ms=int(PROBE_TIMEOUT * 1000),
        **_aiokafka_security(settings),
    )
    try:
        with quiet("aiokafka"), quiet("aiokafka.producer.sender"):
            await producer.start()
        return None
    except KafkaConnectionError:
        return None
    except KafkaError as exc:
        return f"{type(exc).__name__} to InitProducerIdRequest"
    finally:
        with contextlib.suppress(Exception), quiet("aiokafka"):
            await producer.stop()


def _aiokafka_security(settings: Settings) -> dict[str, Any]:
    """SASL/TLS from settings in aiokafka's spelling (the workers' own)."""
    options: dict[str, Any] = {"security_protocol": settings.security_protocol}
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = ssl.create_default_context(cafile=settings.ssl_cafile or None)
    if settings.sasl_mechanism:
        options.update(
            sasl_mechanism=settings.sasl_mechanism,
            sasl_plain_username=settings.sasl_username,
            sasl_plain_password=settings.sasl_password,
        )
    return options


def profile_mismatch(settings: Settings) -> str | None:
    """The one-line reason this broker cannot run ``settings``' profile, or None."""
    if settings.processing_guarantee != "exactly_once":
        return None
    refusal = transactions_refusal(settings)
    if refusal is None:
        return None
    return (
        f"broker {redact_urls(settings.broker)} refuses transactions ({refusal}), so it cannot "
        "run the "
        f"{settings.profile} profile's exactly once; for the embedded tansu broker "
        "(`loopguard demo`'s) use --broker-profile tansu"
    )


def existing_partitions(settings: Settings, timeout: float = 3.0) -> dict[str, int]:
    """Partitions of the topics that must be co-partitioned with the events topic, for those
    that exist; empty when none does or the broker does not answer."""
    from kafka.errors import KafkaError

    from streams.kafka.topics import admin_client
    from streams.worker.startup import co_partitioned

    try:
        with quiet("kafka"):
            admin = admin_client(settings, timeout)
            try:
                described = admin.describe_topics(sorted(co_partitioned(settings)))
            finally:
                admin.close()
    except (KafkaError, OSError, ValueError):
        return {}
    return {
        t["name"]: len(t["partitions"])
        for t in described
        if not t.get("error_code") and t.get("partitions")
    }


def partitions_mismatch(settings: Settings, explicit: bool) -> tuple[int | None, str | None]:
    """(the partition count to use, or an error naming ``--partitions``).

    The events, control and dead-letter topics and the app's changelogs share one partition
    count (Faust's tables rely on it). When those that exist agree on a count other than the
    worker's: without an explicit ``--partitions`` that count is taken, an explicit one is
    refused naming the count to use. When they disagree among themselves, the worker's
    topic check says which topic to recreate."""
    existing = existing_partitions(settings)
    counts = set(existing.values())
    if len(counts) != 1 or settings.partitions in counts:
        return None, None
    (count,) = counts
    if not explicit:
        return count, None
    name = settings.topics.events if settings.topics.events in existing else min(existing)
    return None, (
        f"topic {name} exists with {count} partitions, not {settings.partitions}: start the "
        f"worker with --partitions {count} (or use another --topic-prefix / --app-id for a "
        "new layout)"
    )
