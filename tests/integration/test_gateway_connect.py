"""The Python gateway client against a real broker: given the ``kafka://host:port`` form that
workers and ``loopguard demo`` print, it publishes; on a broker where no worker ever created
loopguard's topics it gives up within its connect budget with one line saying so."""

from __future__ import annotations

from pathlib import Path

import pytest
from services import Pipeline, records_by_key

from streams.gateway.client import GatewayClient, GatewayConnectError
from streams.settings import Topics

pytestmark = pytest.mark.integration


def test_the_kafka_url_form_connects_and_publishes(broker, tmp_path: Path) -> None:
    pipeline = Pipeline(broker, f"sqlite:///{tmp_path / 'audit.db'}", tmp_path).setup()
    assert broker.url.startswith("kafka://")
    client = GatewayClient(broker.url, "gw-url", topics=pipeline.settings.topics)
    try:
        assert client.brokers == broker.bootstrap.split(",")
        run = client.start_run("agent", run_id="url-form-run")
        run.end()
    finally:
        client.close()
    assert records_by_key(broker.bootstrap, pipeline.settings.topics.events)[b"url-form-run"] == 2


def test_a_broker_without_loopguard_topics_is_one_line_within_the_budget(broker) -> None:
    topics = Topics.with_prefix("no-worker-ever-ran-here")
    with pytest.raises(GatewayConnectError) as raised:
        GatewayClient(broker.url, "gw-lonely", topics=topics, connect_timeout_ms=2000)
    message = str(raised.value)
    assert "\n" not in message
    assert "has no topic 'no-worker-ever-ran-here.control' (waited 2 s)" in message
    assert "is a loopguard worker running there with this topic prefix?" in message
