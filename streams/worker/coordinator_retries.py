"""A transaction coordinator lookup cut off by a restarting broker is retried, not fatal
(aiokafka 0.14.0).

aiokafka's transactional sender looks its coordinator up again after the coordinator moved
(``Sender._find_coordinator``). It retries when the broker answers "not available" or is not
connected yet, but a connection that closes while the lookup is on it (the broker it asked
is being restarted) raises a ``KafkaError`` that ends the sender routine ("Unexpected error
during batch delivery"): every pending delivery fails and the worker crashes. A rolling restart of
Apache Kafka did exactly that in tests/integration/test_kafka_failover.py (1 run in 12 on a
loaded machine: a commit's ``EndTxn`` looked its coordinator up as node 0 went down).
:func:`retry_cut_coordinator_lookups` retries such a lookup as aiokafka retries a node that
is not ready: refresh the metadata, wait the retry backoff, ask again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.producer.sender import Sender

log = logging.getLogger("loopguard.worker")

_original_find_coordinator = Sender._find_coordinator
# What the patch wraps, fingerprinted in streams.worker.faust_patches.patch_mismatches: it
# relies on the lookup raising KafkaError from the connection error it could not retry.
REPLACED = {"Sender._find_coordinator": (_original_find_coordinator, "33001a36bf6a0ae0")}


async def _find_coordinator_through_restarts(
    self: Any, coordinator_type: Any, coordinator_key: str
) -> Any:
    while True:
        try:
            return await _original_find_coordinator(self, coordinator_type, coordinator_key)
        except KafkaError as exc:
            if not isinstance(exc.__cause__, KafkaConnectionError):
                raise
            log.warning("coordinator lookup cut off (%s); asking again", exc.__cause__)
            await self.client.force_metadata_update()
            await asyncio.sleep(self._retry_backoff)


def retry_cut_coordinator_lookups() -> None:
    Sender._find_coordinator = _find_coordinator_through_restarts
