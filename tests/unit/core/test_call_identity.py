"""Issue 44, jittered arguments: a call's identity leaves out the execution knobs that change how
it runs, not what it does (streams/core/call_identity.py).

The transcripts are written for these tests: an agent re-running one failing command while it
toggles ``pty``, ``timeout`` and ``yieldMs`` (the loop exact args hashing only ever warned
about), and healthy runs with the same knobs that must never be blocked.
"""

from __future__ import annotations

import json

import pytest
from core_helpers import Run, exec_result, loop_guard, poll_result, text_result

from streams.core.call_identity import identity_params, ignored_args, same_directory
from streams.core.config import ConfigError, resolve
from streams.core.deviations import RAW_CALL_ARGS
from streams.core.events import Action, Decision
from streams.core.hashing import call_info, clear_memos
from streams.core.volatile import VolatileFields

COMMAND = "gog calendar events --from today --json"
USAGE = (
    "error: unknown flag: --from\n"
    "Usage: gog calendar events [--start DATE] [--end DATE] [--json]\n"
    "Run 'gog calendar events --help' for more."
)
# OpenClaw's exec answers a failing command with its exit code: an outcome, not an error.
FAILED = exec_result(USAGE, status="failed", exit_code=1)


def jittered_args(i: int) -> dict[str, object]:
    """The knobs an agent varies from retry to retry: never the same args more than twice in
    80 calls, never twice in a row."""
    args: dict[str, object] = {"command": COMMAND}
    pty = (True, False, None)[i % 3]
    if pty is not None:
        args["pty"] = pty
    timeout = (30, 60, 120, 300, None)[i % 5]
    if timeout is not None:
        args["timeout"] = timeout
    yield_ms = (None, 5000, 10_000, 20_000)[i % 4]
    if yield_ms is not None:
        args["yieldMs"] = yield_ms
    return args


def first_stop(decisions: list[Decision]) -> Decision | None:
    return next((d for d in decisions if d.action is not Action.WARN), None)


def jittered_loop(run: Run, calls: int = 80) -> int | None:
    """The stuck transcript: the same failing command, knobs jittered, a look at the tool's
    docs every ninth call (the same page each time). Returns the number of exec calls made
    when the first block or abort came (that call included), or None."""
    for i in range(calls):
        if i % 9 == 8:
            run.cycle("read", {"path": "skills/gog/SKILL.md"}, text_result("# gog\nUsage: ..."))
        if first_stop(run.cycle("exec", jittered_args(i), FAILED)) is not None:
            return i + 1
    return None


def test_the_jittered_args_really_are_different_calls_for_exact_hashing():
    texts = [json.dumps(jittered_args(i), sort_keys=True) for i in range(80)]
    assert max(texts.count(text) for text in texts) == 2
    assert all(a != b for a, b in zip(texts, texts[1:], strict=False))


def test_a_failing_command_retried_with_jittered_knobs_is_stopped_within_30_calls():
    run = Run(loop_guard(enabled=True))
    stopped_at = jittered_loop(run)
    assert stopped_at is not None and stopped_at <= 30
    stop = first_stop(run.decisions)
    # the docs read between retries make it unchanged_outcome's case before generic_repeat's
    assert stop is not None and stop.detector == "unchanged_outcome"
    assert "exec `gog calendar events --from today --json` returned the same result" in (
        stop.reason
    )
    # the decision names the fields it left out of the call's identity
    named = stop.extra["ignored_args"].split(",")
    assert named and set(named) <= {"pty", "timeout", "yieldMs"}
    assert f"(Compared without {', '.join(named)}: they change how exec runs" in stop.reason


def test_back_to_back_retries_with_jittered_knobs_are_a_generic_repeat():
    run = Run(loop_guard(enabled=True))
    for i in range(40):
        if first_stop(run.cycle("exec", jittered_args(i), FAILED)) is not None:
            break
    stop = first_stop(run.decisions)
    assert stop is not None and (stop.detector, stop.count) == ("generic_repeat", 20)
    assert run.seq == 2 * 21  # the 21st call is blocked (and answered with the veto)


@pytest.mark.parametrize(
    "block",
    [
        {"enabled": True, "deviations": {"ignoreExecutionKnobs": False}},
        {"enabled": True, "compat": "openclaw"},
    ],
)
def test_with_every_arg_in_the_identity_the_same_loop_is_never_stopped(block):
    """The reference's exact hashing: each variant is a call of its own (this is the loop
    issue 44 saw draw only a warning)."""
    run = Run(loop_guard(**block))
    assert jittered_loop(run) is None
    assert all("ignored_args" not in d.extra for d in run.decisions)


def test_a_timed_out_test_suite_rerun_with_a_longer_timeout_and_fixes_is_never_blocked():
    """Healthy twin: the agent raises ``timeout`` because the suite timed out, then fixes
    tests one by one; the knobs vary as in the loop, the output changes."""
    run = Run(loop_guard(enabled=True))
    for i in range(3):  # timed out three times, with ever longer timeouts
        args = {"command": "npm test", "timeout": 30 * (i + 1), "pty": i % 2 == 0}
        run.cycle("exec", args, exec_result("", status="failed", exit_code=None, timed_out=True))
    for failing in range(40, 0, -1):
        args = {"command": "npm test", "timeout": 600, "yieldMs": 20_000 + failing}
        run.cycle("exec", args, exec_result(f"Tests: {failing} failed, 212 passed", exit_code=1))
        edit = {"path": f"src/t{failing}.ts", "oldText": "a", "newText": "b"}
        run.cycle("edit", edit, text_result(f"edited src/t{failing}.ts"))
    run.cycle("exec", {"command": "npm test", "timeout": 600}, exec_result("Tests: 252 passed"))
    assert first_stop(run.decisions) is None


def test_a_long_build_polled_with_varying_waits_while_its_output_grows_is_never_blocked():
    """Healthy twin: a backgrounded build polled 45 times, the poll's ``timeout`` (how long it
    waits for output) varying; every poll shows more output."""
    run = Run(loop_guard(enabled=True))
    start = {"command": "cargo build --release", "background": True, "yieldMs": 10_000}
    run.cycle("exec", start, {"details": {"status": "running", "sessionId": "s1", "tail": ""}})
    lines: list[str] = []
    for i in range(45):
        lines.append(f"   Compiling crate-{i} v0.1.{i}")
        poll = {"action": "poll", "sessionId": "s1", "timeout": (5000, 15_000, 30_000)[i % 3]}
        run.cycle("process", poll, poll_result(output="\n".join(lines)))
    done = poll_result("completed", "\n".join([*lines, "Finished release"]), 0)
    run.cycle("process", {"action": "poll", "sessionId": "s1"}, done)
    assert first_stop(run.decisions) is None


def test_the_same_command_in_other_directories_stays_other_calls():
    """Healthy twin: ``workdir`` is part of what a command does. A monorepo's 30 packages each
    say "no tests" the same way: a scan, not a loop."""
    run = Run(loop_guard(enabled=True))
    for i in range(30):
        args = {"command": "npm test --silent", "workdir": f"packages/p{i}", "pty": i % 2 == 0}
        run.cycle("exec", args, exec_result("No tests found", exit_code=1))
    assert first_stop(run.decisions) is None


def test_flags_that_change_the_output_are_never_blocked():
    """Healthy twin: the agent explores the CLI; each command line (its flags) is another
    call, whatever knobs come with it, and the answers differ."""
    run = Run(loop_guard(enabled=True))
    for i in range(40):
        command = f"gog calendar events --start 2026-05-{i % 28 + 1:02d} --json"
        args = {"command": command, "pty": i % 2 == 0, "timeout": 30 + i}
        run.cycle("exec", args, exec_result(f'[{{"day": {i % 28 + 1}, "events": {i}}}]'))
    assert first_stop(run.decisions) is None


# -- the identity itself ---------------------------------------------------------------


def sig(tool: str, args: object, rules: int = 0, ignored: VolatileFields | None = None) -> str:
    return call_info(tool, json.dumps(args), rules, ignored).sig


def test_execs_knobs_are_left_out_and_what_changes_the_command_is_kept():
    base = sig("exec", {"command": "make"})
    knobs = {"pty": True, "timeout": 5, "timeoutSeconds": 9, "yieldMs": 1, "background": True}
    assert sig("exec", {"command": "make", **knobs, "title": "Build it"}) == base
    for kept in ({"workdir": "lib"}, {"env": {"CI": "1"}}, {"elevated": True}, {"host": "node"}):
        assert sig("exec", {"command": "make", **kept}) != base, kept
    assert sig("exec", {"command": "make -j8"}) != base
    # a poll's wait is a knob; its session and action are not
    poll = sig("process", {"action": "poll", "sessionId": "s1"})
    assert sig("process", {"action": "poll", "sessionId": "s1", "timeout": 30_000}) == poll
    assert sig("process", {"action": "poll", "sessionId": "s2", "timeout": 30_000}) != poll
    # other tools keep every arg (a read's ``timeout`` is its own business)
    assert sig("read", {"path": "a", "timeout": 5}) != sig("read", {"path": "a"})


def test_a_workdir_is_compared_by_the_directory_it_names():
    base = sig("exec", {"command": "make"})
    for default in ("", ".", "./", ".//"):
        assert sig("exec", {"command": "make", "workdir": default}) == base, default
    src = sig("exec", {"command": "make", "workdir": "src"})
    for spelling in ("src/", "./src", "src//", "./src/./"):
        assert sig("exec", {"command": "make", "workdir": spelling}) == src, spelling
    assert sig("exec", {"command": "make", "workdir": "/src"}) != src
    assert sig("exec", {"command": "make", "workdir": "src/.."}) != base  # a link's parent
    assert same_directory("/a//b/./c/") == "/a/b/c"
    assert same_directory("/") == "/"


def test_reference_hashing_keeps_every_arg():
    loose = sig("exec", {"command": "make", "pty": True}, RAW_CALL_ARGS)
    assert loose != sig("exec", {"command": "make"}, RAW_CALL_ARGS)
    assert sig("exec", {"command": "make", "workdir": "./"}, RAW_CALL_ARGS) != sig(
        "exec", {"command": "make"}, RAW_CALL_ARGS
    )


def test_per_tool_ignored_args_extend_the_list_whatever_compat_says():
    fields = VolatileFields(["requestId", "options.*.traceId"])
    a = {"query": "q", "requestId": "r1", "options": {"x": {"traceId": 1, "k": 2}}}
    b = {"query": "q", "requestId": "r2", "options": {"x": {"traceId": 9, "k": 2}}}
    assert sig("search", a, 0, fields) == sig("search", b, 0, fields)
    assert sig("search", a, RAW_CALL_ARGS, fields) == sig("search", b, RAW_CALL_ARGS, fields)
    assert sig("search", a) != sig("search", b)
    changed = {**b, "options": {"x": {"traceId": 9, "k": 3}}}
    assert sig("search", changed, 0, fields) != sig("search", a, 0, fields)
    # the params themselves are never changed (results echo them; the memo shares them)
    params = {"command": "make", "pty": True}
    assert identity_params("exec", params, 0) == {"command": "make"}
    assert params == {"command": "make", "pty": True}


def test_the_memo_keeps_identities_with_and_without_ignored_args_apart():
    clear_memos()
    args = json.dumps({"query": "q", "requestId": "r1"})
    plain = call_info("search", args)
    stripped = call_info("search", args, 0, VolatileFields(["requestId"]))
    assert plain.sig != stripped.sig
    assert call_info("search", args).sig == plain.sig  # a hit: still the plain identity


def test_ignored_args_names_only_what_the_call_holds():
    assert ignored_args("exec", {"command": "x", "pty": False, "timeout": 9}, 0) == [
        "pty",
        "timeout",
    ]
    assert ignored_args("exec", {"command": "x"}, 0) == []
    assert ignored_args("exec", {"command": "x", "pty": True}, RAW_CALL_ARGS) == []
    fields = VolatileFields(["meta.id"])
    assert ignored_args("search", {"meta": {"id": 1}}, RAW_CALL_ARGS, fields) == ["meta.id"]
    assert ignored_args("exec", "not an object", 0) == []


def test_per_tool_ignored_args_in_a_run():
    """``perTool.<tool>.ignoredArgs``: a request id an agent makes up per call no longer hides
    its loop, and the decision names it."""
    lg = loop_guard(enabled=True, perTool={"search": {"ignoredArgs": ["requestId"]}})
    run = Run(lg)
    for i in range(25):
        decided = run.cycle("search", {"q": "x", "requestId": f"r{i}"}, text_result("no hits"))
        if first_stop(decided) is not None:
            break
    stop = first_stop(run.decisions)
    assert stop is not None and stop.extra["ignored_args"] == "requestId"
    assert run.seq <= 2 * 21


def test_ignored_args_config_is_validated_merged_and_versioned():
    assert resolve({}).version == "3820b3802a3991bc"  # defaults keep their version
    with pytest.raises(ConfigError, match=r"perTool\.exec\.ignoredArgs\[0\]: malformed JSON path"):
        resolve({"perTool": {"exec": {"ignoredArgs": ["a..b"]}}})
    with pytest.raises(ConfigError, match=r"ignoredArgs\[1\]: expected a string"):
        resolve({"perTool": {"exec": {"ignoredArgs": ["a", 1]}}})
    one = resolve({"perTool": {"exec": {"ignoredArgs": ["env.TERM", "title"]}}})
    two = resolve({"perTool": {"exec": {"ignoredArgs": ["title", "env.TERM", "title"]}}})
    assert one.version == two.version != resolve({}).version  # order and repeats mean nothing
    view = one.per_tool["exec"]
    assert view.ignored_args == VolatileFields(["env.TERM", "title"])
    off = resolve({"deviations": {"ignoreExecutionKnobs": False}})
    assert off.version != resolve({}).version and off.hash_rules & RAW_CALL_ARGS
