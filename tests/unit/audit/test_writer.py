"""The async audit writer the worker's agents share."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from streams.audit import quarantine
from streams.audit.store import AuditStore
from streams.audit.writer import AuditWriter
from streams.core.events import Action, Decision
from streams.observability.metrics import WorkerMetrics
from streams.wire.avro import DeadLetterRecord, RunWatermark, encode_dead_letter


def _decision(seq: int) -> Decision:
    return Decision(
        run_id="r",
        agent_id="a",
        gateway_id="g",
        seq=seq,
        event_time=seq,
        action=Action.WARN,
        detector="generic_repeat",
        severity="warning",
        count=10,
        tool_name="exec",
        reason="x",
    )


def test_first_writes_from_both_agents_at_once_migrate_once(db_url: str) -> None:
    """Regression: two agents' first writes ran two Alembic migrations concurrently and one
    crashed (KeyError 'config'), which lost the record it was writing."""
    writer = AuditWriter(db_url)
    letter = DeadLetterRecord(
        source_topic="t",
        partition=0,
        offset=1,
        error="bad",
        key=b"k",
        payload=b"\x00",
        event_time=1,
    )

    async def both() -> None:
        await asyncio.gather(
            writer.write_decisions([_decision(1), _decision(2)]),
            writer.write_dead_letter(encode_dead_letter(letter)),
        )

    asyncio.run(asyncio.wait_for(both(), timeout=60))
    assert writer.retries == 0
    with AuditStore(db_url) as store:
        assert store.decision_count() == 2
        assert store.dead_letter_count() == 1


def _with_reason(seq: int, reason: str) -> Decision:
    return dataclasses.replace(_decision(seq), reason=reason)


def _refused_on(db_url: str) -> Decision:
    """A decision this backend refuses for its data: a NUL byte on PostgreSQL, an integer
    SQLite cannot hold."""
    if db_url.startswith("postgresql"):
        return _with_reason(50, "a reason with a NUL\x00 byte")
    return dataclasses.replace(_decision(50), seq=2**70)


def test_a_refused_decision_is_quarantined_and_the_rest_of_its_batch_is_written(
    db_url: str,
) -> None:
    """Issue 26: one record the database refuses for its data was retried forever and every
    later decision stayed unwritten; now it is tried a bounded number of times, kept with the
    database's error, and the trail goes on (its batch, then later batches)."""
    metrics = WorkerMetrics()
    writer = AuditWriter(db_url, metrics=metrics, refused_tries=2)
    bad = _refused_on(db_url)

    async def write() -> tuple[int, list[Decision], int]:
        written, stored = await writer.store_decisions([_decision(1), bad, _decision(2)])
        later = await writer.write_decisions([_decision(3)])
        return written, stored, later

    written, stored, later = asyncio.run(asyncio.wait_for(write(), timeout=60))
    assert (written, later) == (2, 1)
    assert bad not in stored and len(stored) == 2
    with AuditStore(db_url) as store:
        assert store.decision_count() == 3
        kept = quarantine.recent(store)
    assert [(q.kind, q.record_key, q.attempts) for q in kept] == [("decision", bad.decision_id, 2)]
    assert json.loads(kept[0].payload)["seq"] == bad.seq
    assert kept[0].error  # the database's answer
    if db_url.startswith("postgresql"):
        assert "NUL" in kept[0].error
        assert json.loads(kept[0].payload)["reason"] == bad.reason  # kept exactly
    health = writer.health()
    assert health["status"] == "ok" and health["quarantined"] == 1 and health["backlog"] == 0
    assert metrics.snapshot()["audit_quarantined"] == 1

    # Redelivered after a restart: refused again, quarantined once.
    again = AuditWriter(db_url, refused_tries=1)
    assert asyncio.run(asyncio.wait_for(again.write_decisions([bad]), timeout=60)) == 0
    with AuditStore(db_url) as store:
        assert quarantine.count(store) == 1


def _mark(run_id: str, seq: int) -> RunWatermark:
    return RunWatermark(
        run_id=run_id, agent_id="a", gateway_id="g", seq=seq, event_time=seq, event_count=seq
    )


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_refused_progress_and_dead_letters_are_quarantined_too(db_url: str) -> None:
    writer = AuditWriter(db_url, refused_tries=1)
    mark = _mark("run\x00nul", 3)
    letter = DeadLetterRecord(
        source_topic="topic\x00x", partition=0, offset=7, error="bad", payload=b"\x00",
        event_time=1, key=b"k",
    )  # fmt: skip

    async def write() -> None:
        await writer.write_progress([mark, _mark("fine", 1)])
        await writer.write_dead_letter(encode_dead_letter(letter))

    asyncio.run(asyncio.wait_for(write(), timeout=60))
    with AuditStore(db_url) as store:
        assert store.run_progress("fine") is not None
        kinds = sorted(q.kind for q in quarantine.recent(store))
    assert kinds == ["dead_letter", "run_progress"]


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr")
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_sqlite_file_read_only_at_start_is_written_once_it_is_writable_again(
    db_url: str,
) -> None:
    """Issue 26: a file read-only when the writer first connected stayed "attempt to write a
    readonly database" after it became writable again (its connection had opened it
    read-only); the writer now reopens its engine after such an error."""
    with AuditStore(db_url) as store:
        store.migrate()
    path = Path(make_url(db_url).database or "")
    writer = AuditWriter(db_url, max_backoff=0.2)
    if subprocess.run(["chattr", "+i", str(path)], check=False).returncode != 0:
        pytest.skip("this filesystem does not take chattr +i")

    async def scenario() -> int:
        task = asyncio.ensure_future(writer.write_decisions([_decision(1)]))
        try:
            while writer.retries < 2:  # it really failed, more than once
                await asyncio.sleep(0.05)
            assert writer.health()["status"] == "failing"
            assert "readonly" in (writer.health()["last_error"] or "")
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        return await task

    assert asyncio.run(asyncio.wait_for(scenario(), timeout=60)) == 1
    with AuditStore(db_url) as store:
        assert store.decision_count() == 1
    assert writer.health()["status"] == "ok"
