"""Re-send an event published under the wrong key, under its run id, outside any transaction.

Under exactly-once Faust sends through the transaction of the *destination* partition, and
commits that transaction only with that partition's consumed offsets: a re-keyed event could
sit in an open transaction, invisible to read-committed readers (the worker itself), until
the transaction times out. Run state drops an event whose seq it has seen, so a plain
acknowledged send (at least once) is enough here; mis-keyed events are rare, so each waits
for its acknowledgement before the source offset can be committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kafka import KafkaProducer

from streams.settings import Settings


class Rekeyer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer: KafkaProducer | None = None

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] = ()
    ) -> None:
        """Re-send with the message's headers (its gateway's signature, issue 40)."""
        await asyncio.to_thread(self._send_and_wait, topic, key, value, list(headers))

    def _send_and_wait(
        self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]
    ) -> None:
        if self._producer is None:
            self._producer = KafkaProducer(
                bootstrap_servers=self.settings.bootstrap_servers,
                acks="all",
                max_request_size=self.settings.max_message_bytes * 3,
                **self.settings.kafka_client_options(),
            )
        self._producer.send(topic, key=key, value=value, headers=headers).get(timeout=60)
