"""Worker roles on a real broker (issue 42): a ``guard`` process and an ``audit`` process of the
same app id together do what one ``all`` worker does. The guard decides (a ping-pong loop is
warned, blocked and aborted in time) and serves only /healthz and /metrics, touching no
database; the audit process, in its own consumer group (``<app id>-audit``), writes every
decision and the run's progress to the audit trail and serves the status pages."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from services import ENABLED, IN_TIME_BUDGET_MS, Pipeline
from test_pipeline import by_key, drive_ping_pong, expected_decisions, wait_for_audit
from test_webhooks import wait_until

from streams.devtools.embedded_broker import free_port

pytestmark = pytest.mark.integration


def get(port: int, path: str) -> tuple[int, Any]:
    """Status and body (JSON when it is) of GET ``path``; (0, None) while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    except OSError:
        return 0, None
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def test_a_guard_and_an_audit_process_catch_a_loop_and_write_its_audit_rows(
    pipeline_factory: Callable[..., Pipeline], migrated_db_url: str
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    guard_port, audit_port = free_port(), free_port()
    # The guard is given a database it could not open: it must never try.
    no_database = replace(pipeline, db_url="sqlite:////nonexistent/audit.db", workers=[])
    guard = no_database.start_worker(web_port=guard_port, LOOPGUARD_ROLE="guard")
    pipeline.workers.append(guard)  # stopped, and its log shown, with the pipeline's
    pipeline.start_worker(web_port=audit_port, LOOPGUARD_ROLE="audit")
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    pipeline.wait_ready(client)  # the guard decides a canary run

    run = client.start_run("coder")
    assert drive_ping_pong(run, client), "the run was never aborted"
    run.end()
    expected = expected_decisions(run.events)
    rows = wait_for_audit(pipeline, run.run_id, len(expected), timeout=60)
    assert by_key(rows) == by_key(expected)  # written by the audit process

    wait_until(lambda: get(guard_port, "/healthz")[0] == 200, "the guard's /healthz", pipeline)
    status, health = get(guard_port, "/healthz")
    assert health["role"] == "guard" and "db" not in health and "audit" not in health
    assert get(guard_port, "/status")[0] == 404  # the pages are the audit process's
    status, metrics = get(guard_port, "/metrics")
    assert status == 200 and 'loopguard_event_stage_age_seconds_count{stage="decided"}' in metrics
    status, health = get(audit_port, "/healthz")
    assert status == 200 and health["role"] == "audit" and health["app_id"].endswith("-audit")
    assert health["db"] == "ok" and "processing" not in health
    assert get(audit_port, "/status")[0] == 200
    # Run progress from the guard's watermarks, through the audit process's consumer group.
    deadline = time.monotonic() + 30
    while True:
        with pipeline.store() as store:
            (summary,) = [s for s in store.runs() if s.run_id == run.run_id]
        if summary.last_seq == run.seq or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (summary.last_seq, summary.status) == (run.seq, "aborted")
    assert guard.log_path is not None
    guard_log = guard.log_path.read_text()
    assert "audit database" not in guard_log and "audit schema" not in guard_log
    logs = pipeline.worker_logs(tail=10**7)
    assert f"role: guard (consumer group {pipeline.prefix})" in logs
    assert f"role: audit (consumer group {pipeline.prefix}-audit)" in logs
