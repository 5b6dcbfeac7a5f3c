"""Writer schemas looked up before a batch is decided, so the batch's function does no I/O."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from streams.service.batch import writer_fingerprint
from streams.wire.envelope_peek import claimed_gateway
from streams.wire.operator_codec import is_command
from streams.worker.parts import WorkerParts


async def resolve_writer_schemas(parts: WorkerParts, values: Iterable[bytes | None]) -> None:
    """Look up on the schemas topic the writer schemas of ``values`` not seen yet. A
    fingerprint looked up in vain moments ago is not looked up again: junk ids cost no thread
    hop and no broker round trip each (streams/kafka/schema_topic.py); their messages are
    dead-lettered (or skipped, by the agents that only forward). Lookups are shared out per
    producer, the gateway each message names (streams/kafka/lookup_quota.py). An operator's
    command (issue 43) carries a schema of ours, never looked up."""
    registry = parts.registry
    unknown: dict[bytes, str] = {}  # fingerprint -> the producer of its first message
    for value in values:
        fingerprint = writer_fingerprint(value)
        if fingerprint is not None and fingerprint not in registry and not is_command(value):
            unknown.setdefault(fingerprint, claimed_gateway(value))
    if not unknown:
        return
    schemas = parts.schema_topic
    for fingerprint, producer in unknown.items():
        if not schemas.known_missing(fingerprint):
            await asyncio.to_thread(schemas.resolve, fingerprint, producer)
