"""Faults inside a real worker: a failing evaluation is parked, a crashed agent ends the process.

The faults are injected into the worker subprocess by a ``sitecustomize`` module on its
``PYTHONPATH`` (the worker's own code has no test hooks): one makes the detector core raise
on a marked tool, the other makes the guarding agent itself fail on a marked run.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest
from services import ENABLED, IN_TIME_BUDGET_MS
from test_pipeline import expected_decisions, wait_for_count

from streams.core.events import Action
from streams.gateway.client import RunAborted

pytestmark = pytest.mark.integration

RAISING_CORE = """
from streams.core import run_state

_apply = run_state.RunState.apply

def apply(self, event, cfg):
    if getattr(event, "tool_name", "") == "explode":
        raise TypeError("injected: the core failed on this event")
    return _apply(self, event, cfg)

run_state.RunState.apply = apply
"""

CRASHING_AGENT = """
from streams.worker import agents

_guard_batch = agents.WorkerAgents.guard_batch

async def guard_batch(self, messages, *args):
    if any(message.key == b"crash-the-agent" for message in messages):
        raise RuntimeError("injected: the guarding agent fails")
    return await _guard_batch(self, messages, *args)

agents.WorkerAgents.guard_batch = guard_batch
"""


def injected(tmp_path: Path, name: str, code: str) -> dict[str, str]:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(code)
    return {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    }


def loop(run, tool: str = "read", cycles: int = 25) -> None:
    with contextlib.suppress(RunAborted):
        for _ in range(cycles):
            if run.before_tool(tool, {"path": "same.txt"}).allowed:
                run.after_tool(tool, {"path": "same.txt"}, result={"text": "same"})
    run.end()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_an_event_the_core_fails_on_is_dead_lettered_and_the_partition_keeps_guarding(
    pipeline_factory, migrated_db_url: str, tmp_path: Path
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED, partitions=1)  # one partition
    pipeline.start_worker(**injected(tmp_path, "raising-core", RAISING_CORE))
    client = pipeline.client(wait_budget_ms=IN_TIME_BUDGET_MS)
    pipeline.wait_ready(client)

    run = client.start_run("agent-faults")
    run.before_tool("explode", {"n": 1})  # the core raises on this call: parked
    run.after_tool("explode", {"n": 1}, result={"text": "x"})  # also raises: parked
    loop(run)
    events = [e for e in run.events if getattr(e, "tool_name", "") != "explode"]
    received = wait_for_count(client, run.run_id, len(expected_decisions(events)))
    assert {d.action for d in received} >= {Action.WARN, Action.BLOCK}

    later = client.start_run("agent-faults")  # the same (only) partition, later on
    loop(later)
    assert wait_for_count(client, later.run_id, 1)
    with pipeline.store() as store:
        deadline = time.monotonic() + 60
        while store.dead_letter_count() < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert store.dead_letter_count() == 2
    assert "evaluation failed: TypeError: injected" in pipeline.worker_logs(tail=200_000)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_crashed_guarding_agent_ends_the_worker_process(
    pipeline_factory, migrated_db_url: str, tmp_path: Path
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    worker = pipeline.start_worker(**injected(tmp_path, "crashing-agent", CRASHING_AGENT))
    client = pipeline.client()
    pipeline.wait_ready(client)
    run = client.start_run("agent-crash", run_id="crash-the-agent")
    run.before_tool("read", {"path": "x"})
    client.flush()
    deadline = time.monotonic() + 90
    while worker.alive and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not worker.alive, (
        "the worker kept running without its guarding agent\n" + pipeline.worker_logs(20_000)
    )
    assert worker.process is not None and worker.process.returncode != 0
    assert "injected: the guarding agent fails" in pipeline.worker_logs(tail=200_000)
