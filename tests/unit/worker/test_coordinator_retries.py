"""aiokafka's own coordinator lookup, run on a sender whose first lookup loses its connection
(a broker going down mid-request): fatal as shipped, retried with the patch."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.client import CoordinationType
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAuthorizationFailedError
from aiokafka.producer.sender import Sender

from streams.worker import coordinator_retries


class RestartingClusterClient:
    """The calls Sender._find_coordinator makes on its client; lookups fail as queued."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.lookups = 0
        self.metadata_updates = 0

    async def coordinator_lookup(self, coordinator_type: int, key: str) -> int:
        self.lookups += 1
        if self.failures:
            raise self.failures.pop(0)
        return 2

    async def force_metadata_update(self) -> bool:
        self.metadata_updates += 1
        return True

    async def ready(self, node_id: int, group: int = 0) -> bool:
        return True


class TransactionalSender:
    """The state Sender._find_coordinator reads."""

    def __init__(self, client: RestartingClusterClient) -> None:
        self.client = client
        self._txn_manager = object()
        self._coordinators: dict[int, int] = {}
        self._retry_backoff = 0.001


def cut() -> Exception:
    return KafkaConnectionError("Connection at 127.0.0.1:9092 closed")


def test_aiokafka_as_shipped_gives_up_on_a_lookup_cut_off() -> None:
    sender = TransactionalSender(RestartingClusterClient(cut()))
    with pytest.raises(KafkaError, match="Connection at 127.0.0.1:9092 closed"):
        asyncio.run(Sender._find_coordinator(sender, CoordinationType.TRANSACTION, "lg-0-1"))


def test_a_lookup_cut_off_is_asked_again_after_a_metadata_refresh() -> None:
    client = RestartingClusterClient(cut(), cut())
    sender = TransactionalSender(client)
    find = coordinator_retries._find_coordinator_through_restarts
    assert asyncio.run(find(sender, CoordinationType.TRANSACTION, "lg-0-1")) == 2
    assert (client.lookups, client.metadata_updates) == (3, 2)
    assert sender._coordinators == {CoordinationType.TRANSACTION: 2}


def test_other_lookup_errors_still_end_the_sender() -> None:
    client = RestartingClusterClient(TopicAuthorizationFailedError())
    find = coordinator_retries._find_coordinator_through_restarts
    with pytest.raises(KafkaError):
        asyncio.run(find(TransactionalSender(client), CoordinationType.TRANSACTION, "lg-0-1"))
    assert client.lookups == 1
