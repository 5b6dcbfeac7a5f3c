"""The run state's changelog bytes: the binary form round-trips exactly, is small, and the JSON
form earlier versions wrote still loads."""

from __future__ import annotations

import dataclasses
import random
import zlib
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest
from core_helpers import VETO, Run, loop_guard, text_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit.core.test_reference_agreement import CONFIGS, streams

from streams.core.events import RunStarted
from streams.core.run_state import RunState
from streams.state import recent_format, state_format
from streams.worker.state_codec import RunStateCodec

V1_FIXTURE = Path(__file__).parent / "data" / "runstate_v1.json"
# Version 2 bytes of rich_state() and that state's to_dict form, as the version 2 codec wrote
# them (before version 3 packed recent decisions as rows and an idle guard as nil).
V2_FIXTURE = Path(__file__).parent / "data" / "runstate_v2.bin"
V2_DICT = Path(__file__).parent / "data" / "runstate_v2.json"


# errorRepeatThreshold as the default was when the fixtures were written (3 until issue 38):
# their decisions carry that config's version.
RICH_CONFIG = {
    "enabled": True,
    "warningThreshold": 2,
    "criticalThreshold": 4,
    "errorRepeatThreshold": 3,
}


def rich_state() -> tuple[RunState, Any]:
    """A run with every part of the state in use: errors, a missing tool, call ids, a poll
    with an action, a loop veto, recent decisions, an armed compaction guard, a pending call
    and an event waiting behind a gap (how tests/unit/worker/data/runstate_v1.json was made)."""
    lg = loop_guard(**RICH_CONFIG)
    run = Run(lg)
    run.cycle("read_file", {"path": "a"}, {"text": "x"}, call_id="c1")
    run.cycle("exec", {"command": "boom"}, error="unknown tool: nope")
    for i in range(5):
        run.cycle("web_fetch", {"url": "ü/🌀", "n": 2**63 - 1}, {"text": "same"}, call_id=f"w{i}")
    run.compaction()
    run.cycle("process", {"action": "poll", "sessionId": "s"}, {"details": {"status": "running"}})
    run.call("exec", {"cmd": "ls"}, call_id="pending-1")
    late = run.make_call("exec", {"cmd": "pwd"})
    lg.process(run.make_result("exec", {"cmd": "pwd"}, {"status": "ok"}))
    return lg.runs[run.run_id], late


def varied_state(calls: int = 30) -> RunState:
    """Ordinary work at historySize 30: every call and every result different."""
    lg = loop_guard(enabled=True)
    run = Run(lg, run_id="run-00042-5f3e2a1b")
    run.start()
    for i in range(calls):
        args = {"path": f"src/pkg{i % 7}/mod_{i}.py", "line": i * 13}
        tool = ("read_file", "grep", "exec")[i % 3]
        run.cycle(tool, args, text_result(f"out {i}"), call_id=f"call_{i}")
    return lg.runs[run.run_id]


def before_outcome_memory(data: dict[str, Any]) -> dict[str, Any]:
    """A state as bytes written before issue 38 hold it: without the whole-run outcome
    streaks (streams.core.outcome_memory), which start over when such bytes load."""
    return {key: value for key, value in data.items() if key != "outcomes"}


def assert_round_trip(state: RunState) -> bytes:
    payload = state_format.encode(state)
    assert payload[:2] == state_format.HEADER
    restored = state_format.decode(payload)
    assert restored.to_dict() == state.to_dict()
    assert state_format.encode(restored) == payload
    return payload


def test_rich_state_round_trips_and_decides_the_same_afterwards() -> None:
    state, late = rich_state()
    assert state.waiting and state.recent and state.guard.armed
    assert any(r.pending for r in state.history.records)
    assert any(r.action for r in state.history.records)
    assert any(r.unknown_tool for r in state.history.records)
    assert any(r.result_hash.startswith("error:") for r in state.history.records if r.result_hash)
    payload = assert_round_trip(state)
    restored = state_format.decode(payload)
    cfg = loop_guard(**RICH_CONFIG).config_for("agent-1")
    assert restored.apply(late, cfg) == state.apply(late, cfg)
    assert state_format.encode(restored) == state_format.encode(state)


def test_empty_and_fresh_states_round_trip() -> None:
    assert_round_trip(RunState("r"))
    lg = loop_guard(enabled=True)
    Run(lg).start()
    assert_round_trip(lg.runs["run-1"])


def test_digests_are_stored_as_bytes() -> None:
    """Size bound (a plain size check): 30 different calls with different results, each
    digest 32 bytes instead of 64 hex characters plus the tool name."""
    state = varied_state()
    assert len(state.history) == 30
    payload = assert_round_trip(state)
    old = state_format.encode_json(state.to_dict())
    assert len(payload) <= 2_400, len(payload)
    assert len(payload) * 2.4 <= len(old), (len(payload), len(old))


def grep_loop(cycles: int) -> RunState:
    """A run repeating one grep: it warns from the second identical call and never blocks."""
    lg = loop_guard(enabled=True, warningThreshold=2, criticalThreshold=1_000)
    run = Run(lg)
    for _ in range(cycles):
        run.cycle("grep", {"pattern": "TODO"}, {"matches": []})
    return lg.runs["run-1"]


def test_recent_decisions_are_compressed() -> None:
    state = grep_loop(30)
    assert len(state.recent) == 16
    payload = assert_round_trip(state)
    assert len(payload) < len(state_format.encode_json(state.to_dict())) / 10
    assert len(payload) < 1_200, len(payload)


def test_the_json_form_earlier_versions_wrote_still_loads() -> None:
    """A changelog written before the binary form (this file: the previous codec's bytes of
    rich_state()) recovers: every value it held comes back, and it is rewritten in binary."""
    old_bytes = V1_FIXTURE.read_bytes()
    assert old_bytes[:1] == b"{"
    old = orjson.loads(old_bytes)
    loaded = RunStateCodec().loads(old_bytes)
    now = loaded.to_dict()
    assert {key: now[key] for key in old} == old  # fields added since keep their defaults
    payload = assert_round_trip(loaded)
    assert len(payload) < len(old_bytes) / 2
    # ... and it decides as the state it was written from still does.
    state, late = rich_state()
    cfg = loop_guard(**RICH_CONFIG).config_for("agent-1")
    assert [d.decision_id for d in loaded.apply(late, cfg)] == [
        d.decision_id for d in state.apply(late, cfg)
    ]


def test_version_2_bytes_still_load_and_are_rewritten_as_version_3() -> None:
    old_bytes = V2_FIXTURE.read_bytes()
    assert old_bytes[:2] == b"\xc1\x02"
    loaded = state_format.decode(old_bytes)
    assert loaded.to_dict() == orjson.loads(V2_DICT.read_bytes())
    state, late = rich_state()
    assert loaded.to_dict() == before_outcome_memory(state.to_dict())
    payload = assert_round_trip(loaded)
    assert len(payload) < len(old_bytes)
    cfg = loop_guard(**RICH_CONFIG).config_for("agent-1")
    assert loaded.apply(late, cfg) == state.apply(late, cfg)


def test_recent_decisions_cost_their_numbers_not_their_words() -> None:
    """The first decision of a run: the reason's sentence is in the preset dictionary, and
    the run, agent and gateway ids are the state's own (a plain size check)."""
    state = grep_loop(3)
    assert len(state.recent) == 1
    (decision,) = state.recent[0][1]
    assert decision.reason.startswith("WARNING: You have called grep ")
    data = state.to_dict()
    packed = recent_format.pack_recent(data["recent"], data, msgpack.packb)
    assert isinstance(packed, bytes)
    # Version 2 (the same decision as a zlib'd map) took more than twice as much.
    version_2 = zlib.compress(msgpack.packb(data["recent"]), 6)
    assert len(packed) * 2 < len(version_2), (len(packed), len(version_2))
    assert recent_format.unpack_recent(packed, data, msgpack.unpackb) == data["recent"]
    assert_round_trip(state)


def test_a_decision_of_another_run_keeps_its_ids() -> None:
    """Only ids equal to the state's are left out; others are written as they are."""
    state, _ = rich_state()
    data = state.to_dict()
    data["recent"][0][1][0]["gateway_id"] = "gw-elsewhere"
    data["recent"][0][1][0]["seq"] = 999
    payload = state_format.encode_dict(data)
    assert payload is not None
    assert state_format.decode_dict(payload) == data


def test_an_idle_compaction_guard_is_written_as_nil_and_comes_back() -> None:
    state = varied_state(3)
    assert state.to_dict()["guard"] == state_format.IDLE_GUARD
    restored = state_format.decode_dict(assert_round_trip(state))
    assert restored["guard"] == state_format.IDLE_GUARD
    restored["guard"]["counts"]["x"] = 1  # a fresh dict each time, never the shared one
    assert state_format.IDLE_GUARD["counts"] == {}


def test_json_written_now_loads_too() -> None:
    state, _ = rich_state()
    restored = state_format.decode(state_format.encode_json(state.to_dict()))
    assert restored.to_dict() == state.to_dict()


def test_a_key_the_format_does_not_know_is_carried_by_name() -> None:
    """A field added to RunState.to_dict later survives before SCALARS lists it."""
    data = varied_state(3).to_dict()
    data["added_later"] = {"streak": 4, "names": ["a", "b"]}
    payload = state_format.encode_dict(data)
    assert payload is not None
    assert state_format.decode_dict(payload) == data


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(
            lambda d: d["history"][0].__setitem__(2, d["history"][0][2][:-1] + "A"), id="sig"
        ),
        pytest.param(lambda d: d["history"][0].__setitem__(6, "A" * 64), id="result-upper"),
        pytest.param(lambda d: d["history"][0].__setitem__(6, "ab " * 21 + "a"), id="spaces"),
        pytest.param(lambda d: d["history"][0].append("new record field"), id="row"),
        pytest.param(lambda d: d["history"][0].__setitem__(0, -7), id="index"),
        pytest.param(lambda d: d.__setitem__("blocks", 2**70), id="bigint"),
        pytest.param(lambda d: d["history"][0].__setitem__(4, 1), id="poll-int"),
        pytest.param(lambda d: d["recent"][0][1][0].pop("reason"), id="decision-field"),
        pytest.param(lambda d: d["recent"][0][1][0].__setitem__("seq", None), id="nil-seq"),
    ],
)
def test_what_the_binary_form_cannot_hold_goes_out_as_json(odd) -> None:
    data, _ = rich_state()
    data = data.to_dict()
    odd(data)
    assert state_format.encode_dict(data) is None
    assert state_format.decode_dict(state_format.encode_json(data)) == data


def test_text_values_keep_their_exact_spelling() -> None:
    """Loop-veto outcomes, lone surrogates and tool names with colons stay text."""
    lg = loop_guard(enabled=True, warningThreshold=2, criticalThreshold=5)
    run = Run(lg)
    for _ in range(3):
        run.cycle("ns:tool\ud800", {"q": "x"}, {"text": "same"}, call_id="id\udfff")
    run.veto("never_called")
    state = lg.runs["run-1"]
    assert any((r.result_hash or "").startswith("loop-veto:") for r in state.history.records)
    assert_round_trip(state)


def test_unknown_version_is_refused() -> None:
    with pytest.raises(state_format.StateFormatError, match="newer"):
        state_format.decode_dict(b"\xc1\x09\x90")
    with pytest.raises(state_format.StateFormatError, match="version 1 is not"):
        state_format.decode_dict(b"\xc1\x01\x90")


def shuffled(events: list[Any], rng: random.Random) -> list[Any]:
    """Some neighbours swapped (events wait behind a gap), some delivered twice."""
    out = list(events)
    for i in range(len(out) - 1):
        if rng.random() < 0.1:
            out[i], out[i + 1] = out[i + 1], out[i]
    return [e for e in out for _ in range(2 if rng.random() < 0.05 else 1)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(CONFIGS) - 1), streams(), st.integers(0, 2**32), st.data())
def test_any_state_round_trips_exactly(ci, events, seed, data) -> None:
    """Generated runs (loops, parallel calls, results without args, orphans, compactions,
    vetoes, reordering, duplicates): at any point the state's bytes give back the same state,
    the same bytes, and the same decisions for the rest of the run."""
    rng = random.Random(seed)
    lg = loop_guard(**CONFIGS[ci])
    cfg = lg.config_for("agent")
    run = Run(None, run_id="r1", agent_id="agent")
    with_vetoes = [RunStarted(run.envelope())]
    for event in events:  # renumbered, with a loop veto answering some calls
        with_vetoes.append(dataclasses.replace(event, envelope=run.envelope()))
        if rng.random() < 0.05 and hasattr(event, "args_json"):
            with_vetoes.append(run.make_result(event.tool_name, None, VETO, call_id=f"v{run.seq}"))
    delivered = shuffled(with_vetoes, rng)
    cut = data.draw(st.integers(0, len(delivered)))
    state = RunState("r1", cfg.history_size)
    for event in delivered[:cut]:
        if not state.is_duplicate(event.envelope.seq):
            state.apply(event, cfg)
    payload = assert_round_trip(state)
    restored = state_format.decode(payload)
    for event in delivered[cut:]:
        if state.is_duplicate(event.envelope.seq):
            assert restored.is_duplicate(event.envelope.seq)
            continue
        assert restored.apply(event, cfg) == state.apply(event, cfg)
    assert state_format.encode(restored) == state_format.encode(state)


USAGE_FIXTURE = Path(__file__).parent / "data" / "runstate_v3_usage.bin"


def usage_state() -> RunState:
    """rich_state() with its gap filled and two more turns that reported usage (issue 28)."""
    state, late = rich_state()
    lg = loop_guard(**RICH_CONFIG)
    lg.runs[state.run_id] = state
    lg.process(late)  # fills the gap: what waited behind it is processed too
    run = Run(lg, run_id=state.run_id, start_seq=state.last_seq + 1)
    for _ in range(2):
        call = dataclasses.replace(
            run.make_call("web_fetch", {"url": "x"}),
            input_tokens=1_000,
            output_tokens=50,
            cost_usd=0.0125,
        )
        run.feed(call)
    return state


def test_a_state_with_usage_round_trips_and_one_without_is_unchanged() -> None:
    """Usage is a trailing scalar written only for runs that reported some: a state without
    it is the bytes it always was (rich_state's version 3 bytes load as before)."""
    state = usage_state()
    assert state.usage.input_tokens == 2_000 and state.usage.loop_seq
    payload = assert_round_trip(state)
    assert state_format.decode(payload).usage == state.usage
    plain, _ = rich_state()
    plain_bytes = state_format.encode(plain)
    assert "usage" not in state_format.decode_dict(plain_bytes)
    scalars = msgpack.unpackb(plain_bytes[2:], raw=False)[0]
    assert len(scalars) == len(state_format.SCALARS) - 1


def test_usage_bytes_written_now_keep_loading() -> None:
    """A changelog written by this version (the fixture: encode(usage_state()) when usage
    was added) loads to the same state."""
    loaded = state_format.decode(USAGE_FIXTURE.read_bytes())
    assert loaded.to_dict() == before_outcome_memory(usage_state().to_dict())


def test_a_worker_from_before_usage_reads_a_state_with_it() -> None:
    """An older worker knows SCALARS up to error_streak: it stops there and loads the rest."""
    payload = state_format.encode(usage_state())
    known = state_format.SCALARS[: state_format.SCALARS.index("usage")]
    scalars, *rest = msgpack.unpackb(payload[2:], raw=False)
    data = dict(zip(known, scalars, strict=False))
    assert "usage" not in data and data["error_streak"] == usage_state().error_streak
