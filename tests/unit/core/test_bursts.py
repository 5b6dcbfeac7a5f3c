"""Bursts (issue 44): one assistant turn's parallel calls judged as a set (``burst_repeat``).

Hand-written transcripts: the runaway burst the issue describes (one message, 127
``web_fetch`` calls cycling over three URLs, no identical call more than twice in a row) and
the parallel turns legitimate agents make, which must never be blocked. ``Gateway`` plays the
gateway as it really enforces: a block decided on one call refuses the run's *next* call
(published with the loop veto as its outcome), an abort refuses everything after it.
"""

from __future__ import annotations

import json
from typing import Any

from core_helpers import VETO, Run, exec_result, loop_guard, summary, text_result

from streams.core.bursts import MAX_TURN_CALLS
from streams.core.config import resolve
from streams.core.engine import LoopGuard
from streams.core.events import Action, Decision, ToolCall
from streams.core.run_state import RunState
from streams.state.state_format import decode, encode

URLS = ("https://docs.example/a", "https://docs.example/b", "https://docs.example/c")
PAGE = {url: text_result(f"page {url}") for url in URLS}


def on(**block: Any) -> LoopGuard:
    return loop_guard(enabled=True, **block)


class Gateway:
    """A gateway in front of one run: numbers the calls of each turn, obeys the verdicts as
    ``before_tool`` does (a block refuses the next call, an abort every later one)."""

    def __init__(self, lg: LoopGuard) -> None:
        self.run = Run(lg)
        self.blocked_next = False
        self.aborted = False
        self.calls = 0
        self.refused: list[int] = []  # which calls (1-based, in the run) were refused
        self.stopped_at: int | None = None  # the first call refused

    def call(self, tool: str, args: dict[str, Any], turn_id: str | None) -> bool:
        """Publish a call; True when it may run."""
        if self.aborted:
            return False
        self.calls += 1
        number = self.calls
        run = self.run
        event = ToolCall(run.envelope(), tool, json.dumps(args), f"call-{number}", turn_id=turn_id)
        run.events.append(event)
        refused = self.blocked_next
        decided = run.feed(event)
        if refused:
            self.refused.append(number)
            self.stopped_at = self.stopped_at or number
            run.result(tool, args, VETO, call_id=f"call-{number}")
        actions = {d.action for d in decided}
        self.blocked_next = Action.BLOCK in actions
        self.aborted = Action.ABORT in actions
        return not refused

    def answer(self, tool: str, args: dict[str, Any], number: int, result: Any) -> None:
        if number not in self.refused:
            self.run.result(tool, args, result, call_id=f"call-{number}")

    def burst(self, detector: str = "burst_repeat") -> list[tuple[str, str, int]]:
        return [s for s in summary(self.run.decisions) if s[1] == detector]


def parallel_turn(
    gateway: Gateway,
    calls: list[tuple[str, dict[str, Any], Any]],
    turn_id: str | None,
) -> None:
    """One assistant message's calls, all published first; their results arrive after."""
    numbers = []
    for tool, args, _ in calls:
        if gateway.aborted:
            break
        gateway.call(tool, args, turn_id)
        numbers.append(gateway.calls)
    for number, (tool, args, result) in zip(numbers, calls, strict=False):
        gateway.answer(tool, args, number, result)


def sequential_turn(
    gateway: Gateway,
    calls: list[tuple[str, dict[str, Any], Any]],
    turn_id: str | None,
) -> None:
    """The same turn run by a gateway that executes its calls one after the other."""
    for tool, args, result in calls:
        if gateway.aborted:
            break
        gateway.call(tool, args, turn_id)
        gateway.answer(tool, args, gateway.calls, result)


def abc_burst(count: int = 127) -> list[tuple[str, dict[str, Any], Any]]:
    return [("web_fetch", {"url": URLS[n % 3]}, PAGE[URLS[n % 3]]) for n in range(count)]


# -- the loop --------------------------------------------------------------------------


def test_the_127_call_burst_is_stopped_within_its_first_30_repeated_calls():
    gateway = Gateway(on())
    parallel_turn(gateway, abc_burst(), "msg-1")
    # calls 4 on repeat an earlier call of the turn: the stop comes at the 18th repeated call
    assert gateway.stopped_at == 21 and gateway.stopped_at - 3 <= 30
    assert gateway.aborted and gateway.calls == 22  # 21 and 22 refused, then RunAborted
    assert gateway.burst() == [
        *(("warn", "burst_repeat", n) for n in range(8, 16)),
        ("block", "burst_repeat", 16),
        ("block", "burst_repeat", 17),
        ("abort", "burst_repeat", 18),
    ]
    block = next(d for d in gateway.run.decisions if d.action is Action.BLOCK)
    assert block.reason.startswith(
        "CRITICAL: one assistant turn repeated the same 3 calls 16 times "
        "(web_fetch `https://docs.example/b` made 6 times already)."
    )
    assert block.seq == 20  # decided on call 20 (no result has arrived yet): call 21 refused


def test_the_reference_rules_alone_never_stop_it_inside_the_burst():
    """What the issue saw: no identical call more than twice in a row, ten of each in the
    window, no result yet: the other rules let all 127 calls through."""
    gateway = Gateway(on(detectors={"burstRepeat": False}))
    parallel_turn(gateway, abc_burst(), "msg-1")
    assert gateway.stopped_at is None and gateway.calls == 127
    assert {action for action, _, _ in summary(gateway.run.decisions)} <= {"warn"}


def test_with_results_known_at_call_time_the_stop_says_they_were_identical():
    gateway = Gateway(on(detectors={"repeatedCycle": False}))  # the cycle rule would stop it too
    sequential_turn(gateway, abc_burst(), "msg-1")
    assert gateway.stopped_at == 21 and gateway.aborted
    block = next(d for d in gateway.run.decisions if d.action is Action.BLOCK)
    assert block.detector == "burst_repeat"
    assert "made 6 times already, with identical results)" in block.reason


def test_one_call_repeated_among_many_different_ones_is_the_same_loop():
    """Twenty different reads do not hide one call made again and again in the same turn."""
    reads = [("read", {"path": f"src/m{n}.py"}, text_result(f"m{n}")) for n in range(20)]
    same = [("web_search", {"query": "kafka exactly once"}, text_result("hits"))] * 30
    gateway = Gateway(on())
    parallel_turn(gateway, [*reads, *same], "msg-1")
    # blocked on its 18th time (16 repeats, one call repeated), the 19th refused
    assert gateway.stopped_at == 20 + 19 and gateway.aborted


# -- healthy twins: never blocked ------------------------------------------------------


def test_a_turn_reading_20_different_files_draws_nothing():
    gateway = Gateway(on())
    reads = [("read", {"path": f"src/module_{n}.py"}, text_result(f"code {n}")) for n in range(20)]
    parallel_turn(gateway, reads, "msg-1")
    sequential_turn(gateway, reads, "msg-2")  # and again in the next turn, one by one
    assert gateway.run.decisions == [] and gateway.refused == []


def test_a_turn_running_the_same_read_on_5_paths_draws_nothing():
    gateway = Gateway(on())
    paths = ["README.md", "docs/a.md", "docs/b.md", "src/app.py", "tests/test_app.py"]
    for turn in range(12):  # the same five reads, turn after turn (a file watcher's checks)
        parallel_turn(
            gateway,
            [("read", {"path": path}, text_result(f"{path} v{turn}")) for path in paths],
            f"msg-{turn}",
        )
    assert gateway.burst() == [] and gateway.refused == []


def test_ten_files_read_twice_in_one_turn_is_a_glitch_not_a_loop():
    gateway = Gateway(on())
    reads = [("read", {"path": f"f{n}.txt"}, text_result(f"{n}")) for n in range(10)]
    parallel_turn(gateway, reads + reads, "msg-1")
    assert gateway.run.decisions == []


def test_a_generator_asked_for_variants_is_never_blocked():
    """The same call made twelve times in one turn, a tool that answers anew each time."""
    prompt = {"prompt": "a lighthouse at dusk, watercolour"}
    images = [("image_generate", prompt, text_result(f"image-{n}.png")) for n in range(12)]
    sequential = Gateway(on())
    sequential_turn(sequential, images, "msg-1")
    assert sequential.burst() == []  # results known and different: its repeats are forgiven
    parallel = Gateway(on())
    parallel_turn(parallel, images, "msg-1")
    # nothing known yet at call time: warned from the 8th repeat, never blocked
    assert {action for action, _, _ in parallel.burst()} == {"warn"}
    assert parallel.refused == []


def test_a_new_turn_starts_counting_afresh():
    gateway = Gateway(on())
    parallel_turn(gateway, abc_burst(12), "msg-1")  # warned at its 12th call
    assert [action for action, _, _ in gateway.burst()] == ["warn"]
    parallel_turn(gateway, abc_burst(12), "msg-2")
    assert [action for action, _, _ in gateway.burst()] == ["warn", "warn"]


# -- switches, config, fallback --------------------------------------------------------


def decisions_of(lg: LoopGuard, calls: list[tuple[str, dict[str, Any], Any]], turn) -> list:
    gateway = Gateway(lg)
    parallel_turn(gateway, calls, turn)
    return [(d.seq, d.action.value, d.detector, d.count) for d in gateway.run.decisions]


def test_calls_without_turn_ids_get_todays_verdicts():
    burst = abc_burst()
    plain = decisions_of(on(), burst, None)
    assert all(detector != "burst_repeat" for _, _, detector, _ in plain)
    assert plain == decisions_of(on(detectors={"burstRepeat": False}), burst, "msg-1")


def test_compat_openclaw_switches_it_off_unless_set():
    assert decisions_of(loop_guard(enabled=True, compat="openclaw"), abc_burst(), "m") == (
        decisions_of(loop_guard(enabled=True, compat="openclaw"), abc_burst(), None)
    )
    explicit = loop_guard(enabled=True, compat="openclaw", detectors={"burstRepeat": True})
    assert ("block", "burst_repeat") in {
        (action, detector) for _, action, detector, _ in decisions_of(explicit, abc_burst(), "m")
    }


def test_a_tool_can_be_exempt_and_the_thresholds_set():
    exempt = on(perTool={"web_fetch": {"exempt": ["burstRepeat"]}})
    assert all(d != "burst_repeat" for _, _, d, _ in decisions_of(exempt, abc_burst(), "m"))
    tight = on(burstRepeat={"warningThreshold": 2, "criticalThreshold": 4, "repeatsPerCall": 1})
    found = [(seq, action) for seq, action, d, _ in decisions_of(tight, abc_burst(), "m")]
    # 2 repeats before call 6 (a seq is its call's number here: no RunStarted)
    assert found[:3] == [(6, "warn"), (7, "warn"), (8, "block")]


def test_the_thresholds_are_in_the_version_only_when_set():
    assert resolve({"burstRepeat": {"warningThreshold": 8}}).version == resolve({}).version
    assert resolve({"burstRepeat": {"criticalThreshold": 20}}).version != resolve({}).version
    assert resolve({"detectors": {"burstRepeat": False}}).version != resolve({}).version
    raised = resolve({"burstRepeat": {"warningThreshold": 30}})
    assert (raised.burst_repeat_warning, raised.burst_repeat_critical) == (30, 31)


# -- state -----------------------------------------------------------------------------


def test_a_restored_state_goes_on_deciding_the_same():
    burst = abc_burst(30)
    whole = Gateway(on())
    parallel_turn(whole, burst, "msg-1")
    lg = on()
    gateway = Gateway(lg)
    for tool, args, _ in burst[:15]:
        gateway.call(tool, args, "msg-1")
    state = lg.runs["run-1"]
    assert state.to_dict()["turn"][0] == "msg-1"
    lg.runs["run-1"] = decode(encode(state))  # through the changelog's binary form
    assert RunState.from_dict(state.to_dict()).to_dict() == state.to_dict()
    for tool, args, _ in burst[15:]:
        gateway.call(tool, args, "msg-1")
    assert [(d.seq, d.action) for d in gateway.run.decisions] == [
        (d.seq, d.action) for d in whole.run.decisions
    ]


def test_runs_without_turn_ids_keep_no_turn_in_their_state():
    gateway = Gateway(on())
    parallel_turn(gateway, abc_burst(10), None)
    assert "turn" not in gateway.run.lg.runs["run-1"].to_dict()


def test_a_turn_remembers_a_bounded_number_of_calls():
    gateway = Gateway(on())
    many = [("read", {"path": f"f{n}"}, None) for n in range(MAX_TURN_CALLS + 50)]
    parallel_turn(gateway, many, "msg-1")
    turn = gateway.run.lg.runs["run-1"].turn
    assert len(turn.calls) == MAX_TURN_CALLS and turn.repeats == 0
    assert gateway.run.decisions == []


def test_a_late_result_counts_for_the_turns_call_of_the_same_signature():
    lg = on()
    gateway = Gateway(lg)
    gateway.call("exec", {"command": "make"}, "msg-1")
    gateway.call("exec", {"command": "make"}, "msg-2")
    gateway.answer("exec", {"command": "make"}, 1, exec_result("built"))
    entry = next(iter(lg.runs["run-1"].turn.calls.values()))
    # a turn keeps no call ids: the answer to msg-1's call, arriving in msg-2, counts for
    # msg-2's call of the same signature (one result, nothing to compare yet)
    assert (entry.count, entry.answered, entry.varied) == (1, 1, False)


def test_decisions_are_ordinary_ones():
    gateway = Gateway(on())
    parallel_turn(gateway, abc_burst(), "msg-1")
    block: Decision = next(d for d in gateway.run.decisions if d.action is Action.BLOCK)
    assert block.severity == "critical" and block.tool_name == "web_fetch"
    assert block.args_hash.startswith("web_fetch:") and block.extra == {"blocks": "1"}
