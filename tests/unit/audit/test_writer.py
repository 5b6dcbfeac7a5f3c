"""The async audit writer the worker's agents share."""

from __future__ import annotations

import asyncio

from streams.audit.store import AuditStore
from streams.audit.writer import AuditWriter
from streams.core.events import Action, Decision
from streams.wire.avro import DeadLetterRecord, encode_dead_letter


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
