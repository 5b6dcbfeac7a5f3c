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

from streams.worker.patching import Patch, replace

log = logging.getLogger("loopguard.worker")

_original_find_coordinator = Sender._find_coordinator
FIND_COORDINATOR = Patch(
    Sender,
    "_find_coordinator",
    _original_find_coordinator,
    "33001a36bf6a0ae0",
    fixes="a coordinator lookup whose connection closed (its broker restarting) ended aiokafka's "
    "sender and crashed the worker: 1 run in 12 of a rolling restart",
    proof="tests/unit/worker/test_coordinator_retries.py::"
    "test_a_lookup_cut_off_is_asked_again_after_a_metadata_refresh",
)
PATCHES = (FIND_COORDINATOR,)


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
    replace(FIND_COORDINATOR, _find_coordinator_through_restarts)
