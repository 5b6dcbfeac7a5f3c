"""RunHistory's compact bookkeeping (issue 15): a signature's counters live on its newest
record only, and what a run no longer needs is not kept. Checked against a naive count of
the window after every step of random call/result sequences."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.hashing import Outcome, args_hash
from streams.core.history import RunHistory

SIGS = [("read", args_hash("read", {"p": n})) for n in range(3)] + [
    ("write", args_hash("write", {"p": 0}))
]
OUTCOMES = [
    Outcome("h1"),
    Outcome("h2"),
    Outcome("error:x", "browser"),
    Outcome(None, loop_veto=True),
]
EMPTY_DICT_BYTES = sys.getsizeof({})

ops = st.lists(
    st.one_of(
        st.tuples(st.just("call"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("result"), st.integers(0, 50), st.integers(0, 3)),
        st.tuples(st.just("orphan"), st.integers(0, 3), st.integers(0, 3)),
        st.tuples(st.just("resize"), st.integers(1, 6)),
    ),
    max_size=60,
)


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
    history = RunHistory(max_size)
    for step in steps:
        if step[0] == "call":
            tool, sig = SIGS[step[1]]
            call_id = f"id{history.next_index}" if step[2] else None
            history.append_call(tool, sig, call_id, False, None)
        elif step[0] == "result":
            pending = [r for r in history.records if r.pending]
            if pending:
                history.attach_result(pending[step[1] % len(pending)], OUTCOMES[step[2]])
        elif step[0] == "orphan":
            tool, sig = SIGS[step[1]]
            history.append_result(tool, sig, None, False, None, OUTCOMES[step[2]])
        else:
            history.resize(step[1])
        check_bookkeeping(history)
        rebuilt = RunHistory.rebuild(history.max_size, history.next_index, history.to_list())
        check_bookkeeping(rebuilt)
