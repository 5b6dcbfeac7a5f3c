"""``--publish-to``: send replayed decisions to a topic, only ever when asked (never the control
topic by default), in the workers' Avro form so any decision reader can consume them.
"""

from __future__ import annotations

from typing import Any

from streams.replay.compare import INCOMPLETE, RunReport


def publish_decisions(settings: Any, topic: str, reports: list[RunReport]) -> int:
    """Publish the replayed decisions (key = run id) of every run not incomplete; how many."""
    # Deferred: kafka-python and fastavro load only when a replay publishes.
    from kafka import KafkaProducer

    from streams.kafka.topics import create_like
    from streams.wire.avro import encode_decision

    # Brokers that do not create topics on first use (Apache Kafka as deployed) need it made.
    create_like(settings, topic, settings.topics.control)
    producer = KafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        acks="all",
        **settings.kafka_client_options(),
    )
    sent = 0
    try:
        for report in reports:
            if report.status == INCOMPLETE:
                continue  # derived from a partial history: not worth publishing
            for decision in report.decisions:
                producer.send(topic, key=decision.run_id.encode(), value=encode_decision(decision))
                sent += 1
        producer.flush(timeout=30)
    finally:
        producer.close()
    return sent
