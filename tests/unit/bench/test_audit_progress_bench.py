"""The audit progress bench's workload: batches whose runs repeat as asked, written for real."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.lab.audit_progress import batches_of, main


def test_each_run_appears_the_asked_number_of_times_per_batch() -> None:
    batches = batches_of(batch=12, repeats=3, count=2)
    assert [len(marks) for marks in batches] == [12, 12]
    counts = Counter(mark.run_id for mark in batches[0])
    assert set(counts.values()) == {3} and len(counts) == 4
    seqs = [mark.seq for mark in batches[0] if mark.run_id == "run-0-0"]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3  # rising: each repeat moves the run


def test_the_bench_prints_a_figure_per_repeat_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--batch", "20", "--batches", "3", "--repeats", "1,4"]) == 0
    out = capsys.readouterr().out
    assert "each run 1x per batch" in out and "each run 4x per batch" in out
    assert "ratio to the first: 4x" in out
