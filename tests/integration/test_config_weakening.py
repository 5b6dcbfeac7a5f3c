"""Issue 40 on the real broker (tansu by default): a config change that weakens guarding is
recognised by its effect, whoever publishes it, and a poison config record never stops the
worker's config follower.

A ``*`` record published by another producer (no loopguard headers) with ``historySize: 1``
(field names that say nothing of switching off) is logged at WARNING as GUARDING WEAKENED,
recorded in ``config history`` with the loops it no longer stops, and posted to the webhook
once; ``loopguard config set`` refuses the same block unless ``--force``. A 50,000-deep
``[[[…]]]`` record is refused and recorded with its error, and the good record after it
applies."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from services import ENABLED, Pipeline
from sqlalchemy import select
from test_config_topic import config_cli
from test_webhooks import Receiver, wait_until

from streams.audit.config_changes import config_history
from streams.audit.models import WebhookDelivery
from streams.cli.main import main

pytestmark = pytest.mark.integration

WEAK = {"enabled": True, "historySize": 1}
GOOD = {"enabled": True, "warningThreshold": 6}
DEEP = b"[" * 50_000 + b"]" * 50_000


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def produce(pipeline: Pipeline, *values: bytes) -> None:
    """Config records for ``*`` from a producer that is not loopguard's CLI."""
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap, acks="all")
    try:
        for value in values:
            producer.send(pipeline.settings.topics.config, key=b"*", value=value).get(timeout=30)
    finally:
        producer.close()


def logged(pipeline: Pipeline, text: str) -> Callable[[], bool]:
    def check() -> bool:
        path = pipeline.workers[0].log_path
        return path is not None and path.exists() and text in path.read_text()

    return check


def test_a_weakening_record_is_flagged_and_a_poison_one_refused(
    pipeline_factory: Callable[..., Pipeline],
    migrated_db_url: str,
    receiver: Receiver,
    tmp_path: Path,
    capsys,
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED, partitions=1)
    pipeline.start_worker(LOOPGUARD_WEBHOOK_URL=receiver.url)
    pipeline.wait_ready(pipeline.client())
    worker_config = str(tmp_path / f"{pipeline.prefix}-config.json")  # Pipeline writes it

    # The CLI judges the block over the workers' file and the topic: refused unless --force.
    block = tmp_path / "weak.json"
    block.write_text(json.dumps(WEAK))
    args = ("set", "*", "--file", str(block), "--config", worker_config)
    code, out, err = config_cli(capsys, pipeline, *args)
    assert code == 2 and "GUARDING WEAKENED for *" in err and "identical calls" in err, out + err
    assert len(err.strip().splitlines()) == 1

    # Another producer publishes it all the same: the worker flags it by its effect.
    produce(pipeline, json.dumps(WEAK).encode())

    def weakened() -> list:
        with pipeline.store() as store:
            return [c for c in config_history(store, agent="*") if c.weakened]

    wait_until(lambda: len(weakened()) == 1, "the flagged change in config history", pipeline)
    change = weakened()[0]
    assert (change.action, change.source, change.disables) == ("set", "topic", False)
    assert change.weakened.startswith("no longer stopped: identical calls (was blocked at call")
    assert json.loads(change.value or "") == WEAK
    wait_until(logged(pipeline, "GUARDING WEAKENED by the config override for *"), "WARN", pipeline)
    line = next(
        ln
        for ln in pipeline.workers[0].log_path.read_text().splitlines()
        if "GUARDING WEAKENED" in ln
    )
    assert "WARNING" in line and "unknown sender (no loopguard headers)" in line

    notice_id = f"config:{change.change_id}"

    def posted() -> bool:
        with pipeline.store() as store, store.engine.connect() as conn:
            w = WebhookDelivery
            status = conn.scalar(select(w.status).where(w.decision_id == notice_id))
        return status == "sent" and receiver.ids()[notice_id] >= 1

    wait_until(posted, "the webhook notice", pipeline)
    body = next(b for i, b in receiver.posts if i == notice_id)
    assert body["text"].startswith("loopguard guarding weakened for every agent")

    assert main(["config", "history", "--db", pipeline.db_url, "--agent", "*"]) == 0
    table = capsys.readouterr().out
    assert "set (GUARDING WEAKENED)" in table
    assert "GUARDING WEAKENED by the change of * at" in table

    # A poison record, then a good one: refused and recorded, then applied; the worker lives.
    produce(pipeline, DEEP, json.dumps(GOOD).encode())

    def refused_then_set() -> list:
        with pipeline.store() as store:
            return config_history(store, agent="*", limit=2)

    wait_until(
        lambda: [c.action for c in refused_then_set()] == ["set", "refused"],
        "the poison refused and the good record applied",
        pipeline,
    )
    applied, refused = refused_then_set()
    assert "nested deeper than" in refused.error and refused.value is not None
    assert json.loads(applied.value or "") == GOOD and applied.error == ""
    assert applied.weakened == ""  # historySize back to 30: nothing lost against WEAK
    assert pipeline.workers[0].alive
