"""The changelog codec: a run's state survives bytes exactly, waiting events included."""

from __future__ import annotations

from core_helpers import Run, loop_guard

from streams.worker.state_codec import RunStateCodec


def test_state_round_trips_and_decides_the_same_afterwards() -> None:
    lg = loop_guard(enabled=True)
    run = Run(lg)
    for _ in range(4):
        run.cycle("web_fetch", {"url": "ü/🌀", "n": 2**63 - 1}, {"text": "same \\ud800 \n"})
    late = run.make_call("exec", {"cmd": "ls"})
    early = run.make_result("exec", {"cmd": "ls"}, {"status": "ok"})
    lg.process(early)  # out of order: waits in the reorder buffer, so it is in the state
    state = lg.runs[run.run_id]
    assert state.waiting

    codec = RunStateCodec()
    written = codec.dumps(state)
    restored = codec.loads(written)
    assert restored.to_dict() == state.to_dict()
    assert restored.written == written  # a read state keeps what it was read from
    assert codec.dumps(restored) == codec.dumps(state)

    cfg = lg.fleet.for_agent(run.agent_id)
    assert restored.apply(late, cfg) == state.apply(late, cfg)
    assert restored.to_dict() == state.to_dict()
