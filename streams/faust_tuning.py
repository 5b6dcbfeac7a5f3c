"""Broker-client settings Faust does not expose.

Faust hard-codes ``fetch_max_wait_ms=1500`` for the worker's consumer. Apache Kafka answers
a fetch as soon as data arrives, but the tansu broker holds an empty fetch for the whole
wait, so a decision could sit unseen for up to 1.5 s. loopguard shortens the wait
(``LOOPGUARD_FETCH_MAX_WAIT_MS``); against Kafka a short wait only costs a few more idle
fetch requests.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

_original = faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer


def set_fetch_max_wait(ms: int) -> None:
    def create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = _original(self, transport)
        consumer._fetch_max_wait_ms = ms
        return consumer

    faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer = create_worker_consumer
