"""Issue 44, volatile results: a status tool's relative times, clocks and counters are masked
before its results are hashed (streams/core/status_results.py).

The transcripts are written for these tests, the cards in the shape of OpenClaw's
``session_status`` (``buildStatusMessage``): an agent calling it 38 times in five minutes (the
loop of openclaw#73763), and healthy runs that must never be blocked.
"""

from __future__ import annotations

import pytest
from core_helpers import Run, dumps, exec_result, loop_guard, text_result

from streams.core.config import ConfigError, resolve
from streams.core.deviations import RAW_STATUS_RESULTS, STATUS_RESULT
from streams.core.events import Action, Decision
from streams.core.hashing import result_outcome
from streams.core.status_results import mask_status_text


def ago(seconds: int) -> str:
    """OpenClaw's formatAge."""
    minutes = round(seconds / 60)
    return "just now" if minutes < 1 else f"{minutes}m ago"


def tokens(count: int) -> str:
    return f"{count / 1000:.1f}k" if count < 100_000 else f"{count // 1000}k"


def card(second: int, used: int, model: str = "anthropic/claude-opus-4-6") -> dict:
    """A session_status result ``second`` seconds into the loop, ``used`` tokens in."""
    clock = f"10:{42 + second // 60:02d}:{second % 60:02d} PM"
    text = "\n".join(
        [
            "🦞 OpenClaw 2026.4.26 (be8c246)",
            f"🕒 Time: Tuesday, April 28th, 2026 — {clock} (Europe/Berlin)",
            f"🧠 Model: {model} · 🔑 api-key",
            f"🧮 Tokens: {tokens(used)} in / {tokens(used // 40)} out · 💵 Cost: "
            f"${used * 0.000015:.2f}",
            f"📚 Context: {tokens(used)}/200k ({round(used / 2000)}%) · 🧹 Compactions: 0",
            f"🧵 Session: agent:main:main • updated {ago(second % 150)}",
            "⚙️ Runtime: direct · Think: off · elevated",
            "🪢 Queue: collect (depth 0)",
        ]
    )
    details = {
        "ok": True,
        "sessionKey": "agent:main:main",
        "changedModel": False,
        "statusText": text,
    }
    return {"content": [{"type": "text", "text": text}], "details": details}


def first_stop(decisions: list[Decision]) -> Decision | None:
    return next((d for d in decisions if d.action is not Action.WARN), None)


def status_loop(run: Run, calls: int = 38) -> int | None:
    """38 calls of ``session_status {}`` in five minutes, each card a few seconds and a few
    hundred tokens on. Returns the call the first block or abort came on, or None."""
    for i in range(calls):
        if first_stop(run.cycle("session_status", {}, card(8 * i, 94_000 + 450 * i))):
            return i + 1
    return None


def test_the_cards_differ_from_call_to_call():
    texts = {dumps(card(8 * i, 94_000 + 450 * i)) for i in range(38)}
    assert len(texts) == 38


def test_a_session_status_loop_is_stopped_within_30_calls():
    run = Run(loop_guard(enabled=True))
    stopped_at = status_loop(run)
    assert stopped_at is not None and stopped_at <= 30
    stop = first_stop(run.decisions)
    assert stop is not None and (stop.detector, stop.count) == ("generic_repeat", 20)
    assert stopped_at == 21


@pytest.mark.parametrize(
    "block",
    [
        {"enabled": True, "deviations": {"maskStatusResults": False}},
        {"enabled": True, "compat": "openclaw"},
        {"enabled": True, "perTool": {"session_status": {"statusResult": False}}},
    ],
)
def test_hashed_as_they_are_the_cards_never_repeat(block):
    """The reference (and a fleet that opts the tool out): only ever a warning."""
    run = Run(loop_guard(**block))
    assert status_loop(run) is None
    assert {d.detector for d in run.decisions} == {"generic_repeat"}


def test_status_checks_between_real_work_are_never_blocked():
    """Healthy twin: an agent that reads its context usage after every step of real work
    (edits, a test run whose output changes). Its cards' counters moved with that work, so
    the masked repeats with calls between are no unchanged_outcome."""
    run = Run(loop_guard(enabled=True))
    used = 40_000
    for step in range(40):
        path = f"src/m{step}.py"
        run.cycle("edit", {"path": path, "oldText": "a", "newText": "b"}, text_result("ok"))
        run.cycle("exec", {"command": "pytest -q"}, exec_result(f"{40 - step} failed"))
        used += 2_500
        run.cycle("session_status", {}, card(30 * step, used))
    assert first_stop(run.decisions) is None


def deploy_status(state: str, second: int, step: str) -> dict:
    text = f"Deploy #4812: {state} ({step}) · updated {second % 50}s ago · elapsed {second}s"
    return {
        "details": {"state": state, "deploymentId": "dep-4812"},
        "content": [{"type": "text", "text": text}],
    }


def test_polls_whose_status_really_changes_are_never_blocked():
    """Healthy twin: a deploy watched by polling a tool the fleet names a status tool; the
    clock, the relative time and the counters change on every poll, the state four times."""
    lg = loop_guard(enabled=True, perTool={"deploy_status": {"statusResult": True}})
    run = Run(lg)
    states = [("queued", "waiting for a runner")] * 8 + [("building", "docker build")] * 12
    states += [("testing", "smoke tests")] * 10 + [("deploying", "rolling update")] * 12
    states += [("live", "healthy")]
    for i, (state, step) in enumerate(states):
        run.cycle("deploy_status", {"id": "dep-4812"}, deploy_status(state, 15 * i, step))
    assert first_stop(run.decisions) is None


def test_a_status_tool_stuck_in_one_state_is_stopped():
    """The same tool stuck in "building": only its clocks move."""
    lg = loop_guard(enabled=True, perTool={"deploy_status": {"statusResult": True}})
    run = Run(lg)
    for i in range(30):
        decided = run.cycle(
            "deploy_status", {"id": "dep-4812"}, deploy_status("building", 15 * i, "docker build")
        )
        if first_stop(decided):
            break
    stop = first_stop(run.decisions)
    assert stop is not None and stop.detector == "generic_repeat" and run.seq == 2 * 21


# -- masking ---------------------------------------------------------------------------


def test_relative_times_are_one_whatever_their_wording():
    said = ["updated just now", "updated 1m ago", "updated 2 minutes ago", "updated 3h 20m ago"]
    said += ["updated a minute ago", "updated an hour ago", "updated 45s ago"]
    assert {mask_status_text(text) for text in said} == {"updated <ago>"}


def test_counters_clocks_and_dates_are_masked():
    assert mask_status_text("🧮 Tokens: 12k in / 1.4k out · 💵 Cost: $0.42") == (
        "🧮 Tokens: <n> in / <n> out · 💵 Cost: $<n>"
    )
    assert mask_status_text("📚 Context: 45k/200k (23%) · 🧹 Compactions: 2") == (
        "📚 Context: <n>/<n> (<n>) · 🧹 Compactions: <n>"
    )
    assert mask_status_text("Time: 10:42 PM on 2026-04-28, up 3d 4h, 98765 s") == (
        "Time: <time> on <date>, up <n> <n>, <n>"
    )
    assert mask_status_text("at 2026-04-28T22:42:05Z") == "at <datetime>"


def test_what_names_a_state_is_kept():
    models = {mask_status_text(f"Model: {m}") for m in ("claude-opus-4-6", "claude-sonnet-4-5")}
    assert len(models) == 2  # digits inside a name are no counter
    assert mask_status_text("Session: agent:main:subagent:a1b2") == (
        "Session: agent:main:subagent:a1b2"
    )
    assert mask_status_text("no activity") != mask_status_text("updated just now")
    assert mask_status_text("gpt-4o v2") == "gpt-4o v2"


def test_a_status_outcome_keeps_its_exact_hash_for_the_guard():
    a = result_outcome("session_status", None, dumps(card(0, 94_000)), None)
    b = result_outcome("session_status", None, dumps(card(8, 94_450)), None)
    assert a.result_hash == b.result_hash
    assert a.exact_hash and b.exact_hash and a.exact_hash != b.exact_hash
    assert a.counters and not a.empty
    other_model = result_outcome(
        "session_status", None, dumps(card(0, 94_000, "openai/gpt-5.1")), None
    )
    assert other_model.result_hash != a.result_hash
    # the reference's rule: hashed as any result
    raw_a = result_outcome("session_status", None, dumps(card(0, 94_000)), None, RAW_STATUS_RESULTS)
    assert raw_a.result_hash == a.exact_hash and not raw_a.counters


def test_a_bare_status_text_is_masked_too():
    a = result_outcome("session_status", None, dumps("updated just now, 12k tokens"), None)
    b = result_outcome("session_status", None, dumps("updated 3m ago, 14k tokens"), None)
    assert a.result_hash == b.result_hash


def test_only_status_tools_are_masked():
    a = result_outcome("read", None, dumps(text_result("12 lines")), None)
    b = result_outcome("read", None, dumps(text_result("13 lines")), None)
    assert a.result_hash != b.result_hash
    marked_a = result_outcome("read", None, dumps(text_result("12 lines")), None, STATUS_RESULT)
    marked_b = result_outcome("read", None, dumps(text_result("13 lines")), None, STATUS_RESULT)
    assert marked_a.result_hash == marked_b.result_hash
    # exec keeps its own rule (exit code, output) even when named a status tool
    failed = result_outcome("exec", None, dumps(exec_result("x 1", exit_code=1)), None, 64)
    ok = result_outcome("exec", None, dumps(exec_result("x 1", exit_code=0)), None, 64)
    assert failed.result_hash != ok.result_hash


def test_status_result_config():
    assert resolve({}).version == "3820b3802a3991bc"  # defaults keep their version
    on = resolve({"compat": "openclaw", "perTool": {"deploy_status": {"statusResult": True}}})
    assert on.per_tool["deploy_status"].hash_rules & STATUS_RESULT  # an operator's own list
    off = resolve({"perTool": {"session_status": {"statusResult": False}}})
    assert off.per_tool["session_status"].hash_rules & RAW_STATUS_RESULTS
    assert off.version != resolve({}).version
    with pytest.raises(ConfigError, match=r"statusResult: expected true or false, got 'yes'"):
        resolve({"perTool": {"x": {"statusResult": "yes"}}})
