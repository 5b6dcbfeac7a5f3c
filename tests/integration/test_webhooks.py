"""Webhooks from a real worker: a loop caught on the real broker reaches a local HTTP server as
exactly one POST per block and abort decision in the audit trail, and a worker that crashed
before committing anything, replaced by a new one that reads the whole control topic again,
posts nothing twice."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from services import ENABLED, IN_TIME_BUDGET_MS, Pipeline
from sqlalchemy import select
from test_pipeline import drive_ping_pong

from streams.audit.models import DecisionRow, WebhookDelivery
from streams.devtools.worker_process import wait_until_processing
from streams.gateway.client import GatewayClient
from streams.webhooks.notifier import DECISION_HEADER

pytestmark = pytest.mark.integration


class Receiver:
    """A local HTTP server in a thread that records every POST (decision id header, JSON)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        lock, posts = threading.Lock(), self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    posts.append((self.headers[DECISION_HEADER], body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/loopguard"

    def ids(self) -> Counter[str]:
        return Counter(decision_id for decision_id, _ in list(self.posts))

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def wait_until(condition: Callable[[], bool], what: str, pipeline: Pipeline, timeout=60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            print(pipeline.worker_logs())
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def notified_decisions(pipeline: Pipeline) -> set[str]:
    """Block and abort decision ids in the audit trail (what must be posted)."""
    d = DecisionRow
    with pipeline.store() as store, store.engine.connect() as conn:
        stmt = select(d.decision_id).where(d.action.in_(("block", "abort")))
        return set(conn.scalars(stmt))


def delivery_statuses(pipeline: Pipeline) -> dict[str, str]:
    w = WebhookDelivery
    with pipeline.store() as store, store.engine.connect() as conn:
        return dict(conn.execute(select(w.decision_id, w.status)).all())


def loop_until_aborted(pipeline: Pipeline, client: GatewayClient) -> str:
    run = client.start_run("coder")
    assert drive_ping_pong(run, client), "the run was never aborted"
    run.end()
    return run.run_id


def all_posted_once(pipeline: Pipeline, receiver: Receiver, run_id: str) -> Callable[[], bool]:
    """True once the run's abort (its last decision) is in the audit trail and every block
    and abort there has been posted and recorded as sent."""

    def check() -> bool:
        expected = notified_decisions(pipeline)
        if not any(i.startswith(f"{run_id}:") and i.endswith(":abort") for i in expected):
            return False
        sent = set(delivery_statuses(pipeline).values()) == {"sent"}
        return sent and set(receiver.ids()) >= expected

    return check


def test_each_block_and_abort_is_posted_once_even_after_a_crash(
    pipeline_factory: Callable[..., Pipeline], migrated_db_url: str, receiver: Receiver
) -> None:
    # One partition: once the new worker has posted a new run's notifications, its audit agent
    # has read every earlier control message again (they come first on that partition).
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED, partitions=1)
    # At least once on every broker: exactly once (Kafka's default) shows a decision only
    # when its transaction commits, and this test needs decisions seen but never committed.
    hook = {
        "LOOPGUARD_WEBHOOK_URL": receiver.url,
        "LOOPGUARD_PROCESSING_GUARANTEE": "at_least_once",
    }
    # Commit nothing: the crash below leaves every event and control message to be read again.
    first = pipeline.start_worker(**hook, LOOPGUARD_COMMIT_INTERVAL="3600")
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    pipeline.wait_ready(client)

    looped = loop_until_aborted(pipeline, client)
    wait_until(all_posted_once(pipeline, receiver, looped), "the first run's webhooks", pipeline)
    before = receiver.ids()
    assert set(before) == notified_decisions(pipeline)
    assert all(n == 1 for n in before.values()), before
    actions = {body["blocks"][2]["fields"][4]["text"] for _, body in receiver.posts}
    assert actions == {"*Action*\nblock", "*Action*\nabort"}
    bodies = [body for i, body in receiver.posts if i.startswith(f"{looped}:")]
    assert all(body["text"].startswith("loopguard ") and looped in body["text"] for body in bodies)

    first.kill()
    second = pipeline.start_worker(**hook)
    wait_until_processing(client, workers=[second])  # the killed one is not coming back
    again = loop_until_aborted(pipeline, client)
    wait_until(all_posted_once(pipeline, receiver, again), "the second run's webhooks", pipeline)

    posted = receiver.ids()
    assert set(posted) == notified_decisions(pipeline)
    assert all(n == 1 for n in posted.values()), f"posted more than once: {posted}"
    assert set(before) < set(posted)
    # The new worker did read the first run's decisions again (nothing had been committed).
    assert second.log_path is not None
    assert "already recorded (a redelivery)" in second.log_path.read_text()
