"""Writer schemas looked up before a batch is decided, so the batch's function does no I/O."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from streams.service.batch import writer_fingerprint
from streams.worker.parts import WorkerParts


async def resolve_writer_schemas(parts: WorkerParts, values: Iterable[bytes | None]) -> None:
    """Look up on the schemas topic the writer schemas of ``values`` not seen yet. A
    fingerprint looked up in vain moments ago is not looked up again: junk ids cost no thread
    hop and no broker round trip each (streams/kafka/schema_topic.py); their messages are
    dead-lettered (or skipped, by the agents that only forward)."""
    registry = parts.registry
    unknown = {
        fingerprint
        for value in values
        if (fingerprint := writer_fingerprint(value)) is not None and fingerprint not in registry
    }
    if not unknown:
        return
    schemas = parts.schema_topic
    for fingerprint in unknown:
        if not schemas.known_missing(fingerprint):
            await asyncio.to_thread(schemas.resolve, fingerprint)
