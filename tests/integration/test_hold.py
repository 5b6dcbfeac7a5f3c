"""Hold instead of fail (issue 43) on a real broker and worker: an agent with ``onBlock:
"hold"`` has its gateway hold the blocked call; an operator's release posted to the worker's
web endpoint (its real HTTP server, with the web token) lets the held call through; an abort
ends the run; with nobody answering, ``holdDefault`` applies and is recorded."""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import urlencode

import pytest
from services import IN_TIME_BUDGET_MS
from test_web import wait_for_web
from web_client import Client

from streams.audit.releases import read_releases
from streams.core.events import ABORT_DETECTOR, RELEASE_DETECTOR
from streams.devtools.embedded_broker import free_port
from streams.gateway.verdicts import RunAborted

pytestmark = pytest.mark.integration

TOKEN = "hold-web-token-2c9e"
LIMITS = {
    "enabled": True,
    "historySize": 12,
    "warningThreshold": 3,
    "criticalThreshold": 5,
    "globalCircuitBreakerThreshold": 40,
    "abortAfterBlocks": 30,
    "onBlock": "hold",
    "holdTimeoutSeconds": 120,
}
CONFIG = {
    "tools": {"loopDetection": LIMITS},
    "agents": {
        "list": [
            {
                "id": "impatient",
                "tools": {
                    "loopDetection": {**LIMITS, "holdTimeoutSeconds": 1, "holdDefault": "abort"}
                },
            },
            {
                "id": "lenient",
                "tools": {
                    "loopDetection": {**LIMITS, "holdTimeoutSeconds": 1, "holdDefault": "release"}
                },
            },
        ]
    },
}
ARGS = {"path": "/var/log/app.log"}
SAME = {"text": "no change"}


def held_call(run) -> tuple[threading.Thread, dict]:
    """Loop in a thread until a call is held; returns once it is. The held call's outcome
    (its verdict, or RunAborted) lands in the dict when the hold ends."""
    outcome: dict = {}

    def loop() -> None:
        try:
            while not run.holds:
                verdict = run.before_tool("read", ARGS)
                if run.holds:
                    outcome["verdict"] = verdict
                else:
                    run.after_tool("read", ARGS, result=SAME)
        except RunAborted as exc:
            outcome["aborted"] = exc

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    while run.holding is None and thread.is_alive():
        thread.join(0.05)  # until the call is held (or the loop ended)
    return thread, outcome


def test_a_held_call_goes_through_on_a_release_posted_to_the_web_endpoint(
    pipeline_factory, migrated_db_url
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG)
    port = free_port()
    pipeline.start_worker(web_port=port, LOOPGUARD_WEB_TOKEN=TOKEN)
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    try:
        pipeline.wait_ready(client)
        wait_for_web(f"http://127.0.0.1:{port}")
    except Exception:
        print(pipeline.worker_logs())
        raise
    run = client.start_run("holder")
    thread, outcome = held_call(run)
    assert run.holding is not None and run.holding.extra["on_block"] == "hold"

    web = Client(port, None)
    path = f"/runs/{run.run_id}/release"
    body = urlencode({"reason": "the build takes long", "calls": "5", "by": "bob"})
    assert web.request(path, method="POST", body=body).status == 401  # the token
    foreign = {"Authorization": f"Bearer {TOKEN}", "Origin": "https://evil.example"}
    assert web.request(path, method="POST", body=body, headers=foreign).status == 403
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    # the trail knows the run once the worker recorded its progress
    for _ in range(100):
        reply = web.request(path, method="POST", body=body, headers=bearer)
        if reply.status != 404:
            break
        thread.join(0.1)
    assert reply.status == 202, reply.body
    sent = json.loads(reply.body)
    thread.join(30)
    assert not thread.is_alive(), "the release did not end the hold"
    verdict = outcome["verdict"]
    assert verdict.allowed and verdict.blocked_by is None
    run.after_tool("read", ARGS, result=SAME)
    run.end()

    # The run page lists the release, with the forms behind the token.
    for _ in range(100):
        with pipeline.store() as store, store.engine.connect() as conn:
            rows = read_releases(conn, run_id=run.run_id)
        if rows:
            break
        thread.join(0.1)
    (row,) = rows
    assert (row.release_id, row.released_by, row.source, row.calls) == (
        sent["release_id"], "bob", "web", 5,
    )  # fmt: skip
    page = web.get(f"/status/run?{urlencode({'id': run.run_id})}", headers=bearer)
    assert page.status == 200 and 'id="operator"' in page.body
    assert "the build takes long" in page.body


def recorded_release(pipeline, run_id: str, timeout: float = 30.0):
    """The run's one operator_releases row, once the worker's audit wrote it."""
    deadline = time.monotonic() + timeout
    while True:
        with pipeline.store() as store, store.engine.connect() as conn:
            rows = read_releases(conn, run_id=run_id)
        if rows or time.monotonic() > deadline:
            (row,) = rows
            return row
        time.sleep(0.1)


def test_with_no_answer_the_hold_default_aborts_and_is_recorded(
    pipeline_factory, migrated_db_url
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG)
    client = pipeline.start_ready(wait_budget_ms=IN_TIME_BUDGET_MS)
    run = client.start_run("impatient")
    thread, outcome = held_call(run)
    thread.join(60)
    assert not thread.is_alive()
    aborted = outcome["aborted"]
    assert aborted.decision.detector == ABORT_DETECTOR
    assert "holdDefault abort" in aborted.decision.reason
    row = recorded_release(pipeline, run.run_id)
    assert (row.command, row.source) == ("abort", "hold")


GATEWAY_KEY = {"h1": "hold-gateway-secret-5d0c2a"}
KEYS = {  # as compose's: the gateway's key and an operator's, which the gateway does not hold
    "gateways": {"gw-hold": GATEWAY_KEY, "gw-other": {"o1": "other-gateway-secret-91b7"}},
    "operators": {"op1": "hold-operator-secret-77e1"},
}


def test_under_gateway_keys_the_hold_default_signed_by_the_runs_gateway_applies(
    pipeline_factory, migrated_db_url
) -> None:
    """With keys (compose and the demo set them) a gateway's holdDefault is signed with its
    own key: the worker applies it to that gateway's run, so an unanswered hold ends in the
    configured abort or release instead of a refusal 10 s later."""
    pipeline = pipeline_factory(migrated_db_url, config=CONFIG)
    pipeline.start_worker(LOOPGUARD_GATEWAY_KEYS=json.dumps(KEYS))
    client = pipeline.client("gw-hold", wait_budget_ms=IN_TIME_BUDGET_MS, signing_keys=GATEWAY_KEY)
    try:
        pipeline.wait_ready(client, timeout=120)
    except Exception:
        print(pipeline.worker_logs())
        raise

    run = client.start_run("impatient")
    thread, outcome = held_call(run)
    thread.join(60)
    assert not thread.is_alive()
    assert "aborted" in outcome, outcome  # not the refusal of an unanswered default
    assert "holdDefault abort" in outcome["aborted"].decision.reason
    assert (recorded_release(pipeline, run.run_id).source) == "hold"

    run = client.start_run("lenient")
    thread, outcome = held_call(run)
    thread.join(60)
    assert not thread.is_alive()
    verdict = outcome["verdict"]
    assert verdict.allowed and verdict.blocked_by is None, verdict
    assert [d.detector for d in client.decisions(run.run_id)][-1] == RELEASE_DETECTOR
    run.after_tool("read", ARGS, result=SAME)
    run.end()
    row = recorded_release(pipeline, run.run_id)
    assert (row.command, row.source, row.calls) == ("release", "hold", 10)
    with pipeline.store() as store:
        assert store.dead_letter_count() == 0  # neither default was refused
