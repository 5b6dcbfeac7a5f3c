"""A batch's watermarks as one progress row and one usage row per run (the store's tests check
the rows leave what upserting the watermarks one by one leaves, against real databases)."""

from __future__ import annotations

from dataclasses import replace

from streams.audit.progress_rows import progress_rows, usage_rows
from streams.wire.avro import RunWatermark


def mark(run_id: str, seq: int, status: str = "active", agent_id: str = "a") -> RunWatermark:
    return RunWatermark(
        run_id=run_id,
        agent_id=agent_id,
        gateway_id="gw",
        seq=seq,
        event_time=seq * 1_000,
        status=status,
        event_count=seq,
    )


def test_a_run_seen_in_several_batches_of_the_worker_is_one_row() -> None:
    marks = [
        mark("a", 1, agent_id=""),
        mark("b", 4),
        mark("a", 3),
        mark("a", 2),  # older: moves nothing, sets no status
        mark("a", 3, "aborted"),  # the same seq: its status wins
    ]
    rows = {row["run_id"]: row for row in progress_rows(marks)}
    assert list(rows) == ["a", "b"]
    assert rows["a"] == {
        "run_id": "a",
        "agent_id": "a",  # the first non-empty one
        "gateway_id": "gw",
        "last_seq": 3,
        "events": 3,
        "first_event_time": 1_000,
        "last_event_time": 3_000,
        "status": "aborted",
    }


def test_usage_keeps_the_last_watermark_at_the_highest_seq() -> None:
    marks = [
        replace(mark("a", seq), input_tokens=tokens)
        for seq, tokens in [(2, 5), (3, 7), (3, 9), (1, 11)]
    ]
    (row,) = usage_rows(marks)
    assert (row["last_seq"], row["input_tokens"]) == (3, 9)
