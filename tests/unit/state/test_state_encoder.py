"""The worker's state encoder: the very bytes :func:`state_format.encode` writes, whether a run's
packed recent decisions are reused or packed anew."""

from __future__ import annotations

from core_helpers import Run, loop_guard, text_result

from streams.state import state_format
from streams.state.state_encoder import StateEncoder


def looping_run(run_id: str = "run-loop") -> tuple[Run, object]:
    lg = loop_guard(enabled=True, warningThreshold=2, criticalThreshold=4)
    return Run(lg, run_id=run_id), lg


def test_every_write_of_a_looping_run_is_the_plain_encoding() -> None:
    run, lg = looping_run()
    encoder = StateEncoder()
    for i in range(12):  # warned, then refused: the kept decisions grow, then stay
        run.cycle("web_fetch", {"url": "u"}, text_result("same"), call_id=f"c{i}")
        state = lg.runs[run.run_id]
        assert encoder.encode(state) == state_format.encode(state)
        assert encoder.encode(state) == state_format.encode(state)  # the remembered bytes
        assert state.written == state_format.encode(state)  # kept: the rollback point
    assert state.recent, "the run was never decided on"
    # An ordinary event after the loop: its decisions stay, so do their packed bytes.
    run.cycle("read_file", {"path": "a"}, text_result("new"), call_id="c-last")
    assert encoder.encode(state) == state_format.encode(state)


def test_packed_decisions_are_reused_only_while_the_run_holds_the_same_ones() -> None:
    run, lg = looping_run()
    encoder = StateEncoder()
    for i in range(4):
        run.cycle("web_fetch", {"url": "u"}, text_result("same"), call_id=f"c{i}")
    state = lg.runs[run.run_id]
    assert state.recent
    encoder.encode(state)
    marker, packed = encoder.packed[run.run_id]
    run.cycle("read_file", {"path": "b"}, text_result("other"), call_id="c-other")
    encoder.encode(state)
    assert encoder.packed[run.run_id][1] is packed  # no new decision: the same bytes
    # A restored state holds equal decisions (other objects): its bytes are the same.
    restored = state_format.decode(state_format.encode(state))
    assert encoder.encode(restored) == state_format.encode(state)
    # A new decision changes what is packed.
    for i in range(4, 8):
        run.cycle("web_fetch", {"url": "u"}, text_result("same"), call_id=f"c{i}")
    assert encoder.encode(state) == state_format.encode(state)
    assert encoder.packed[run.run_id][0] != marker


def test_remembers_at_most_max_runs() -> None:
    encoder = StateEncoder(max_runs=2)
    states = []
    for n in range(3):
        run, lg = looping_run(f"run-{n}")
        for i in range(4):
            run.cycle("web_fetch", {"url": "u"}, text_result("same"), call_id=f"c{i}")
        states.append(lg.runs[run.run_id])
        encoder.encode(states[-1])
    assert list(encoder.packed) == ["run-1", "run-2"]  # the least recently written went out
    assert encoder.encode(states[0]) == state_format.encode(states[0])


def test_runs_without_decisions_are_not_remembered() -> None:
    lg = loop_guard(enabled=True)
    run = Run(lg, run_id="run-quiet")
    run.cycle("read_file", {"path": "a"}, text_result("x"), call_id="c1")
    encoder = StateEncoder()
    state = lg.runs[run.run_id]
    assert encoder.encode(state) == state_format.encode(state)
    assert not encoder.packed
