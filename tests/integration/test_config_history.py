"""The control plane is accountable (issue 26 item 4), on a real broker and real workers:
``loopguard config set '*'`` turning guarding off is recorded in SQL once with its value, the
versions around it and its sender (the CLI's headers), although two workers follow the config
topic; each worker logs it at WARNING with the value and the sender; the webhook receiver gets
exactly one notice; ``loopguard config history`` lists it, and the workers' config file too."""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from services import ENABLED, Pipeline
from sqlalchemy import select
from test_config_topic import config_cli
from test_webhooks import Receiver, wait_until

from streams.audit.config_changes import config_history
from streams.audit.models import WebhookDelivery
from streams.cli.main import main
from streams.core.config import resolve

pytestmark = pytest.mark.integration

OFF = {"enabled": False}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def logged_by_every_worker(pipeline: Pipeline, text: str) -> Callable[[], bool]:
    def check() -> bool:
        return all(
            w.log_path is not None and w.log_path.exists() and text in w.log_path.read_text()
            for w in pipeline.workers
        )

    return check


def test_switching_guarding_off_for_everyone_is_recorded_warned_and_posted_once(
    pipeline_factory: Callable[..., Pipeline],
    migrated_db_url: str,
    receiver: Receiver,
    tmp_path: Path,
    capsys,
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED, partitions=2)
    hook = {"LOOPGUARD_WEBHOOK_URL": receiver.url}
    pipeline.start_worker(**hook)
    pipeline.start_worker(**hook)  # both follow the config topic; the change is one row
    pipeline.wait_ready(pipeline.client())

    block = tmp_path / "off.json"
    block.write_text(json.dumps(OFF))
    # Issue 40: the CLI judges the change by its effect and refuses a weakening one...
    code, out, err = config_cli(capsys, pipeline, "set", "*", "--file", str(block))
    assert code == 2 and "GUARDING WEAKENED for *" in err and "--force" in err, out + err
    # ...unless forced; the workers flag it all the same.
    code, out, _ = config_cli(capsys, pipeline, "set", "*", "--file", str(block), "--force")
    assert code == 0, out

    warning = 'turns guarding OFF for every agent: {"enabled":false}'
    wait_until(logged_by_every_worker(pipeline, warning), "the WARNING of each worker", pipeline)
    for worker in pipeline.workers:
        line = next(ln for ln in worker.log_path.read_text().splitlines() if warning in ln)
        assert "WARNING" in line
        assert f"{getpass.getuser()}@{socket.gethostname()}" in line  # the sender
        assert "client loopguard-config" in line

    def recorded() -> list:
        with pipeline.store() as store:
            return [c for c in config_history(store, agent="*") if c.source == "cli"]

    wait_until(lambda: len(recorded()) == 1, "the change in the audit trail", pipeline)
    change = recorded()[0]
    assert change.action == "set" and change.disables
    assert json.loads(change.value or "") == OFF
    assert change.version_before == resolve(ENABLED["tools"]["loopDetection"]).version
    assert change.version_after == resolve(OFF).version
    assert (change.sender_user, change.sender_host) == (getpass.getuser(), socket.gethostname())
    assert change.client_id == "loopguard-config" and change.principal == ""  # no SASL here
    assert change.topic == pipeline.settings.topics.config and change.offset is not None

    notice_id = f"config:{change.change_id}"

    def posted() -> bool:
        with pipeline.store() as store, store.engine.connect() as conn:
            w = WebhookDelivery
            status = conn.scalar(select(w.status).where(w.decision_id == notice_id))
        return status == "sent" and receiver.ids()[notice_id] >= 1

    wait_until(posted, "the webhook notice", pipeline)
    assert receiver.ids()[notice_id] == 1
    body = next(b for i, b in receiver.posts if i == notice_id)
    assert "turned off" in body["text"] and getpass.getuser() in body["text"]

    # Both workers recorded their config file: one row, the same document and version.
    with pipeline.store() as store:
        files = config_history(store, agent="(file)")
    assert len(files) == 1 and files[0].source == "file"

    # A restarted worker reads the whole config topic again: still one row, one post.
    pipeline.workers[0].stop()
    pipeline.workers.pop(0)
    pipeline.start_worker(**hook)
    wait_until(
        logged_by_every_worker(pipeline, warning), "the restarted worker's WARNING", pipeline
    )
    assert len(recorded()) == 1
    assert receiver.ids()[notice_id] == 1

    url = pipeline.db_url
    assert main(["config", "history", "--db", url, "--json", "--agent", "*"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["change_id"] for r in rows if r["source"] == "cli"] == [change.change_id]
    assert main(["config", "history", "--db", url]) == 0
    table = capsys.readouterr().out
    assert "guarding off for all" in table and getpass.getuser() in table


def test_a_config_change_applies_while_the_audit_database_is_down(
    pipeline_factory: Callable[..., Pipeline], tmp_path: Path, capsys
) -> None:
    """Recording never stands in the config's way: with the audit database unreachable the
    worker still applies the change (and says so), the record waits in the recorder."""
    down = "postgresql+psycopg://nobody@127.0.0.1:1/loopguard"  # nothing listens on port 1
    pipeline = pipeline_factory(down, config=ENABLED, partitions=1)
    pipeline.start_worker()
    block = tmp_path / "tuned.json"
    block.write_text(json.dumps({"enabled": True, "warningThreshold": 3}))
    code, out, _ = config_cli(capsys, pipeline, "set", "tuned", "--file", str(block))
    assert code == 0, out
    applied = "config override for tuned applied (from "
    wait_until(logged_by_every_worker(pipeline, applied), "the override applied", pipeline)
    waiting = "while writing config change"  # the audit writer waits out the outage
    wait_until(logged_by_every_worker(pipeline, waiting), "the recorder's wait", pipeline)
    assert all(w.alive for w in pipeline.workers)
