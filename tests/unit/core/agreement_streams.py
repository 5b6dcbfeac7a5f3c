"""Generated runs for the reference-agreement test (test_reference_agreement.py): one run's
events with loops likely (repeats, alternations, sticky results), parallel calls, results in
any order with or without args and call ids, orphan results and compaction storms.

With ``reference_only`` the streams also carry what only the compat comparison can judge,
because the default-mode model does not restate those loopguard rules: exec output with
clock times and PIDs (masked by loopguard), ``update_plan`` calls (hashed by shape),
``session_status`` cards whose counters move (masked by loopguard, issue 44) and loop
vetoes answering calls (an outcome for loopguard, none for the reference), some right after
their call, as a gateway that enforces a block answers it (issue 38: a blocked call followed
by anything else ran anyway, and the reference recorded it). ``vetoes=False``: a gateway
that never vetoes (``mode: "observe"``), so every blocked call runs.
"""

from __future__ import annotations

import json
from typing import Any

from core_helpers import Run
from hypothesis import strategies as st
from unit.core.reference_model import VETO_JSON

from streams.core.events import ToolResult

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read", {"path": "a"}),
    ("read", {"path": "a", "limit": 1}),
    ("read", {"path": "a", "limit": 1.0}),  # the same call as the one above
    ("read", {"path": "b", "n": 12345678901234567890}),
    ("read", {"path": "b", "n": 12345678901234567000}),  # the same double
    ("write", {"path": "a", "content": "x"}),
    ("process", {"action": "poll", "sessionId": "s1"}),
    ("process", {"action": "log", "sessionId": "s1"}),
    ("command_status", {"id": "c1"}),
    ("exec", {"command": "make"}),
    ("exec", {"command": "make", "timeout": 2.0}),  # the same call for loopguard (issue 44)
    ("message", {"action": "send", "text": "hi"}),
    ("message", {"action": "read"}),
    ("conversations_turn", {"conversationRef": "c", "text": "hi"}),
    ("sessions_send", {"message": "m"}),
    ("browser", {"url": "u"}),
    ("telegram_send", {"chat": "c", "text": "hi"}),  # a send by loopguard's naming rule
]


def plan(*steps: str, explanation: str = "") -> dict[str, Any]:
    return {"plan": [{"step": s, "status": "pending"} for s in steps], "explanation": explanation}


# Only in reference_only streams: a status tool (issue 44: its cards' counters are masked by
# loopguard), and plans loopguard hashes by shape (the three are one shape, reworded), so a
# re-planning loop is a loop for loopguard and not for the reference.
REFERENCE_ONLY_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("session_status", {}),
    ("update_plan", plan("build", "test")),
    ("update_plan", plan("compile", "check")),
    ("update_plan", plan("build", "test", explanation="again")),
]


def text(body: str, **details: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": body}], "details": details}


def exec_out(aggregated: Any, text_body: str = "", **details: Any) -> dict[str, Any]:
    fields = {"status": "completed", "exitCode": 0, "aggregated": aggregated, "pid": 4242}
    return {"content": [{"type": "text", "text": text_body}], "details": {**fields, **details}}


def sent(message_id: str, **extra: Any) -> dict[str, Any]:
    details = {"status": "sent", "text": "hi", "messageId": message_id, "ts": len(message_id)}
    return {"details": {**details, **extra}, "content": [{"type": "text", "text": "sent"}]}


def ok(result: Any) -> tuple[str | None, str | None]:
    return json.dumps(result), None


def fail(error: str) -> tuple[str | None, str | None]:
    return None, error


# Families of results, as (result JSON text or None, error or None). A tool sticks to one
# family for a while and answers with any of its variants: the variants of a family are
# meant to be the same outcome for some tools (trimmed text, 1 vs 1.0, fresh send ids, blank
# exec output and its text), so loops with churn that is not progress are likely. Exec output
# has no digits, so loopguard's masking of clock times, durations and PIDs never applies.
Outcome = tuple[str | None, str | None]
TEXT: list[list[Outcome]] = [
    [ok(text("A")), ok(text("A \n")), ok(text("\ufeffA"))],
    [ok(text("B"))],
    [ok(text("A", n=1)), ok(text("A", n=1.0)), ok(text("A", n=1e0))],
    [ok(text("A", n=2)), ok(text("A", n=2.5))],
    [ok([1, 2.0]), ok([1.0, 2])],
    [ok("plain")],
    [("null", None)],
    [ok({"text": "code 1"})],  # bare objects: their own details
    [ok({"text": "code 2"}), ok({"text": "code 2", "n": 1.0}), ok({"n": 1, "text": "code 2"})],
    [ok({"text": "code 1"}), ok({"text": "code 3"})],  # bare: one outcome for the reference
]
ERRORS: list[list[Outcome]] = [
    [(None, None)],  # neither result nor error: no outcome
    [fail("Unknown tool: browser"), fail("unknown tool browser"), fail("tool Browser not found")],
    [fail("boom"), fail("")],
]
POLL: list[list[Outcome]] = [
    [ok({"details": {"status": "running", "aggregated": "x"}, "content": []})],
    [
        ok({"details": {"aggregated": "x"}, "content": []}),  # status missing: undefined
        ok({"details": {"status": None, "aggregated": "x"}, "content": []}),
    ],
]
SENDS: list[list[Outcome]] = [
    [ok(sent("m-1")), ok(sent("m-2")), ok(sent("m-3", sentAt=5))],
    [ok(sent("m-4", n=1.0)), ok(sent("m-5", n=1)), ok(sent("m-6", runId="r", n=1))],
    [ok({"details": {"status": "replied", "reply": "yo", "runId": f"r-{i}"}}) for i in range(3)],
    [ok({"ok": True, "messageId": f"m{i}"}) for i in range(3)],  # bare, a fresh id each
    [ok({"ok": False, "error": "rate limited", "ts": 5})],
]
EXEC: list[list[Outcome]] = [
    [ok(exec_out("ok")), ok(exec_out("ok\n")), ok(exec_out("  ", "ok")), ok(exec_out("", "ok "))],
    [ok(exec_out("fail", exitCode=1)), ok(exec_out("fail", exitCode=1.0))],
    [ok(exec_out("fail", exitCode=2.0)), ok(exec_out("fail\n", exitCode=2))],
    [ok(exec_out("fail", exitCode=True)), ok(exec_out("fail", exitCode=None))],
    [ok(exec_out("fail", status="failed", exitCode=None, timedOut=True))],
    [ok({"details": {"status": "running", "tail": "waiting"}})],
    [ok({"details": {"status": "running", "tail": 5}}), ok({"details": {"status": "running"}})],
    [ok({"details": {"status": "approval-pending", "command": "rm", "host": "h", "id": 1}})],
    [ok("ok\n"), ok("ok"), ok(" ok ")],  # the bare output string
]
# Only in reference_only streams: output that differs in its clock times, PIDs and durations
# only, one outcome for loopguard's masking and several for the reference.
CLOCKS: list[list[Outcome]] = [
    [ok(exec_out(f"build at 2026-01-02 10:00:0{i} took {i}ms")) for i in range(3)],
    [ok(exec_out(f"worker pid {40 + i} stuck at 10:00:0{i}", exitCode=1)) for i in range(3)],
    [ok({"details": {"status": "running", "tail": f"waiting 10:00:0{i}"}}) for i in range(3)],
    [ok(f"done in {i}s at 10:00:0{i}") for i in range(3)],  # a bare output string
]


def status_card(minutes: int, tokens: int, state: str = "idle") -> dict[str, Any]:
    """A session_status card: its clock, relative time and counters move from call to call."""
    card = (
        f"🕒 Time: 10:{minutes:02d} PM\n🧮 Tokens: {tokens}k in / {tokens // 10}k out\n"
        f"🧵 Session: agent:main:main • updated {minutes}m ago · {state}"
    )
    details = {"ok": True, "sessionKey": "agent:main:main", "statusText": card}
    return {"content": [{"type": "text", "text": card}], "details": details}


# Only in reference_only streams: cards that differ in their clock and counters only (one
# outcome per family for loopguard, one per card for the reference); the families' states differ.
STATUS: list[list[Outcome]] = [
    [ok(status_card(i, 40 + 3 * i)) for i in range(4)],
    [ok(status_card(i, 40 + 3 * i, "busy")) for i in range(3)],
]
PLANS: list[list[Outcome]] = [
    [ok({"details": {"status": "updated", "plan": [{"step": w, "status": "pending"}]}})]
    for w in ("a", "b")
]
RESULTS = TEXT + POLL + SENDS + EXEC + ERRORS
# The families each tool mostly answers with; any family otherwise.
FAMILIES = {
    **dict.fromkeys(["read", "write", "browser"], TEXT + ERRORS),
    **dict.fromkeys(["process", "command_status"], POLL + ERRORS),
    **dict.fromkeys(
        ["message", "conversations_turn", "sessions_send", "telegram_send"], SENDS + ERRORS
    ),
    "exec": EXEC + ERRORS,
}
REFERENCE_ONLY_FAMILIES = {
    **FAMILIES,
    "exec": EXEC + CLOCKS + ERRORS,
    "update_plan": PLANS,
    "session_status": STATUS,
}
# What a loop of these tools answers with half the time in reference_only streams: the
# families whose variants only loopguard's rules make one outcome.
REFERENCE_ONLY_LOOPS = {
    "exec": [*CLOCKS, EXEC[-1]],
    "read": [TEXT[-1]],
    "update_plan": PLANS,
    "session_status": STATUS,
    "telegram_send": [SENDS[0], SENDS[3]],  # fresh ids: one outcome by loopguard's naming rule
}


@st.composite
def streams(draw, max_ops: int = 60, reference_only: bool = False, vetoes: bool = True):
    """One run's events, in seq order: calls (some parallel, with or without call ids),
    results in any order (args omitted when a call id says which call), orphan results,
    compactions of every kind; loops are likely (repeats, alternations, sticky results)."""
    vetoes = reference_only and vetoes
    calls = CALLS + REFERENCE_ONLY_CALLS if reference_only else CALLS
    families = REFERENCE_ONLY_FAMILIES if reference_only else FAMILIES
    results = RESULTS + CLOCKS + PLANS + STATUS if reference_only else RESULTS
    run = Run(None, run_id="r1", agent_id="agent", time_step=100)
    pending: list[tuple[str, dict[str, Any], str | None]] = []
    recent: list[int] = []
    sticky: dict[str, list[Outcome]] = {}

    def answer(tool: str, args: dict[str, Any], call_id: str | None, loop: bool = False) -> None:
        if tool not in sticky or (not loop and draw(st.integers(0, 3)) == 0):
            own = draw(st.integers(0, 3)) > 0
            sticky[tool] = draw(st.sampled_from(families[tool] if own else results))
        result_json, error = draw(st.sampled_from(sticky[tool]))
        if vetoes and draw(st.integers(0, 9)) == 0:  # a gateway that vetoed the call
            result_json, error = VETO_JSON, None
        # args omitted: mostly with a call id, sometimes with neither (a gateway that knows
        # only the tool's name)
        omit = draw(st.integers(0, 3))
        args_json = None if (call_id and omit < 2) or omit == 0 else json.dumps(args)
        run._keep(ToolResult(run.envelope(), tool, args_json, result_json, error, call_id))

    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.integers(0, 12))
        if kind == 12 and recent:  # a loop: whole cycles of the last one or two calls
            cycle = recent[-2:] if draw(st.booleans()) else recent[-1:]
            for tool, _ in (calls[which] for which in cycle):
                if reference_only and tool in REFERENCE_ONLY_LOOPS and draw(st.booleans()):
                    sticky[tool] = draw(st.sampled_from(REFERENCE_ONLY_LOOPS[tool]))
            for i in range(draw(st.integers(2, 12))):  # same family of results throughout
                tool, args = calls[cycle[i % len(cycle)]]
                run.make_call(tool, args)
                answer(tool, args, None, loop=True)
        elif kind <= 5 or (kind <= 9 and not pending):
            if kind <= 3 and len(recent) >= 2:  # repeat (0-1) or ping-pong (2-3)
                which = recent[-1] if kind <= 1 else recent[-2]
            else:
                which = draw(st.integers(0, len(calls) - 1))
            recent.append(which)
            tool, args = calls[which]
            call_id = f"c{run.seq + 1}" if draw(st.booleans()) else None
            run.make_call(tool, args, call_id)
            if vetoes and call_id and draw(st.integers(0, 7)) == 0:  # vetoed: never ran
                args_json = json.dumps(args) if draw(st.booleans()) else None
                run._keep(ToolResult(run.envelope(), tool, args_json, VETO_JSON, None, call_id))
            else:
                pending.append((tool, args, call_id))
        elif kind <= 9:
            index = -1 if draw(st.booleans()) else draw(st.integers(0, len(pending) - 1))
            answer(*pending.pop(index))
        elif kind == 10:
            trigger = draw(st.sampled_from(["context_overflow", "timeout", "continuation"]))
            for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):  # storms: back to back
                run.make_compaction(trigger)
        else:  # a result nobody asked for (its call was lost)
            tool, args = calls[draw(st.integers(0, len(calls) - 1))]
            result_json, error = draw(st.sampled_from(draw(st.sampled_from(results))))
            args_json = None if draw(st.integers(0, 3)) == 0 else json.dumps(args)
            run._keep(ToolResult(run.envelope(), tool, args_json, result_json, error))
    return run.events
