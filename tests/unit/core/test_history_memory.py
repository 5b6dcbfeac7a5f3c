"""RunHistory's compact bookkeeping (issue 15): a signature's counters live on its newest
record only, and what a run no longer needs is not kept. Checked against a naive count of
the window after every step of random call/result sequences."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.history import RunHistory
from tests.unit.core.test_run_state import apply_history_ops, history_op

EMPTY_DICT_BYTES = sys.getsizeof({})

# test_run_state's call/result/orphan steps, and resizes of the window between them
ops = st.lists(st.one_of(history_op, st.tuples(st.just("resize"), st.integers(1, 6))), max_size=60)


def check_bookkeeping(history: RunHistory) -> None:
    records = history.records
    assert set(history.sig_last) == {r.sig for r in records}
    for sig, head in history.sig_last.items():
        same = [r for r in records if r.sig == sig]
        answered = [r for r in same if r.result_hash is not None]
        assert head is same[-1]
        assert (head.sig_count, head.sig_results) == (len(same), len(answered))
        newest = max(answered, key=lambda r: r.index) if answered else None
        assert head.latest_result is newest
        assert history.count(sig) == len(same)
    heads = set(map(id, history.sig_last.values()))
    # only heads point at a result record, so no record outside the window is held that way
    assert all(r.latest_result is None for r in records if id(r) not in heads)
    assert not any(r.pending for r in records) or history.pending_by_sig
    for table in (history.pending_by_sig, history.pending_by_id):
        if not table:  # emptied tables give their memory back
            assert sys.getsizeof(table) == EMPTY_DICT_BYTES


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), ops)
def test_counters_on_newest_record_match_the_window(max_size: int, steps: list) -> None:
    def check(history: RunHistory) -> None:
        check_bookkeeping(history)
        rebuilt = RunHistory.rebuild(history.max_size, history.next_index, history.to_list())
        check_bookkeeping(rebuilt)

    apply_history_ops(RunHistory(max_size), steps, check)
