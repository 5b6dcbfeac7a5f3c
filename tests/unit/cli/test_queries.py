"""``loopguard history`` and ``loopguard runs`` (text and ``--json``) on SQLite and PostgreSQL,
and ``--help`` of every subcommand. The audit trail is filled with decisions the detector core
made for a few runs, so the expected output is the store's own answer."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace

import pytest
from core_helpers import Run, final_watermark, loop_guard

from streams.audit.store import AuditStore
from streams.cli.common import EXIT_ERROR, EXIT_OK
from streams.cli.main import build_parser, main
from streams.cli.times import format_ms
from streams.core.events import Action, Decision
from streams.core.usage import SAVINGS_METHOD, SAVINGS_METHOD_DOC
from streams.devtools.worker_process import CANARY_AGENT

START = 1_700_000_000_000


def summary_json(summary) -> dict:
    data = asdict(summary)
    data["worst_action"] = data["worst_action"].value
    data["usage"] = None  # these runs' gateways report no usage (issue 28)
    return data


@pytest.fixture
def filled(audit_store: AuditStore) -> dict[str, list[Decision]]:
    """Three runs: a repeat loop to abort, a compaction loop, and a run with warnings only."""
    lg = loop_guard(enabled=True, warningThreshold=3, criticalThreshold=5)
    runs = {
        "run-repeat": Run(lg, "run-repeat", "coder", "gw-1", start_time=START),
        "run-compaction": Run(lg, "run-compaction", "writer", "gw-2", start_time=START + 10**6),
        "run-warned": Run(lg, "run-warned", "coder", "gw-2", start_time=START + 2 * 10**6),
    }
    repeat = runs["run-repeat"]
    repeat.start()
    while not any(d.action is Action.ABORT for d in repeat.decisions):
        repeat.cycle("grep", {"q": "x"}, {"text": "none"})
    compaction = runs["run-compaction"]
    compaction.start()
    compaction.compaction()
    for _ in range(3):
        compaction.cycle("web_fetch", {"url": "u"}, error="timeout <b>")
    warned = runs["run-warned"]
    for i in range(4):
        warned.cycle("read", {"path": "a"}, {"text": f"changing {i}"})
    for run in runs.values():
        assert run.decisions, run.run_id
        audit_store.record_decisions(run.decisions)
        status = "aborted" if run.run_id == "run-repeat" else "active"
        audit_store.record_progress([final_watermark(run, status)])
    return {run_id: run.decisions for run_id, run in runs.items()}


def cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out


def test_history_json_is_the_store_history(filled, audit_store, capsys) -> None:
    url = str(audit_store.url.render_as_string(hide_password=False))
    for run_id, decisions in filled.items():
        code, out = cli(capsys, "history", run_id, "--db", url, "--json")
        assert code == EXIT_OK
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines == [d.to_dict() for d in audit_store.history(run_id)]
        assert lines == [d.to_dict() for d in sorted(decisions, key=lambda d: d.seq)]


def test_history_text_lists_each_decision(filled, audit_store, capsys) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    code, out = cli(capsys, "history", "run-repeat", "--db", url)
    assert code == EXIT_OK
    lines = out.splitlines()
    history = audit_store.history("run-repeat")
    progress = audit_store.run_progress("run-repeat")
    assert progress is not None
    assert lines[0] == (
        f"run run-repeat (agent coder, gateway gw-1): {len(history)} decisions, "
        f"status aborted, {progress.events} events"
    )
    assert lines[1].split()[:5] == ["seq", "time", "(UTC)", "action", "detector"]
    assert len(lines) == len(history) + 2
    for line, decision in zip(lines[2:], history, strict=True):
        assert line.split()[:5] == [
            str(decision.seq),
            format_ms(decision.event_time).split()[0],
            format_ms(decision.event_time).split()[1],
            decision.action.value,
            decision.detector,
        ]
        assert f"count={decision.count}" in line and decision.reason in line
    assert lines[-1].split()[3] == "abort"


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_history_of_an_unknown_run_is_an_error(filled, audit_store, capsys, json_flag) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    code = main(["history", "no-such-run", "--db", url, *json_flag])
    out, err = capsys.readouterr()
    assert code == EXIT_ERROR and out == ""
    assert err.splitlines() == [
        f"loopguard history: no run 'no-such-run' in the audit trail at {url} "
        "(`loopguard runs` lists the runs with decisions)"
    ]


def test_history_of_a_run_without_decisions_says_so(filled, audit_store, capsys) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    quiet = Run(loop_guard(enabled=True), "run-quiet", "coder", "gw-1", start_time=START)
    quiet.cycle("read", {"path": "a"}, {"text": "a"})
    audit_store.record_progress([final_watermark(quiet, "ended")])
    code, out = cli(capsys, "history", "run-quiet", "--db", url)
    assert code == EXIT_OK
    assert out.splitlines()[0].startswith("run run-quiet (agent coder, gateway gw-1): 0 decisions")


@pytest.mark.parametrize(
    "flags, kwargs",
    [
        ([], {}),
        (["--agent", "coder"], {"agent": "coder"}),
        (["--gateway", "gw-2"], {"gateway": "gw-2"}),
        (["--detector", "post_compaction_guard"], {"detector": "post_compaction_guard"}),
        (["--severity", "critical"], {"severity": "critical"}),
        (["--severity", "warning", "--agent", "coder"], {"severity": "warning", "agent": "coder"}),
        (["--since", str(START + 10**6)], {"since_ms": START + 10**6}),
        (["--until", str(START + 10**6)], {"until_ms": START + 10**6}),
        (["--limit", "1"], {"limit": 1}),
        (["--agent", "nobody"], {"agent": "nobody"}),
    ],
)
def test_runs_json_is_the_store_answer(filled, audit_store, capsys, flags, kwargs) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    code, out = cli(capsys, "runs", "--db", url, "--json", *flags)
    assert code == EXIT_OK
    expected = [summary_json(s) for s in audit_store.runs(**{"limit": 50, **kwargs})]
    assert [json.loads(line) for line in out.splitlines()] == expected  # JSON lines
    for run in expected:  # every run has its progress
        assert run["status"] in ("active", "aborted") and run["last_seq"] and run["events"]


def test_runs_text(filled, audit_store, capsys) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    code, out = cli(capsys, "runs", "--db", url)
    assert code == EXIT_OK
    header, *lines = out.splitlines()
    assert header.split()[:6] == ["last", "decision", "(UTC)", "run", "agent", "gateway"]
    # newest decision first, each with the time of its latest decision
    assert [line.split()[2] for line in lines] == ["run-warned", "run-compaction", "run-repeat"]
    repeat = next(line for line in lines if "run-repeat" in line)
    summary = next(s for s in audit_store.runs() if s.run_id == "run-repeat")
    assert repeat.startswith(format_ms(summary.last_decision_time))
    counts = {a: sum(d.action is a for d in filled["run-repeat"]) for a in Action}
    progress = audit_store.run_progress("run-repeat")
    assert progress is not None and progress.last_seq == progress.events > 0
    assert repeat.split()[3:13] == [
        "coder",
        "gw-1",
        "abort",
        str(counts[Action.WARN]),
        str(counts[Action.BLOCK]),
        str(counts[Action.ABORT]),
        "0",
        "aborted",
        str(progress.events),
        ",".join(summary.detectors),
    ]
    compaction = next(line for line in lines if "run-compaction" in line)
    # then loop tokens and the saved estimate: "-" for runs whose gateway reports no usage
    assert compaction.split()[-3:] == ["post_compaction_guard", "-", "-"]

    code, out = cli(capsys, "runs", "--db", url, "--agent", "nobody")
    assert code == EXIT_OK and out.strip() == "no runs match"


def test_runs_names_the_saved_estimates_method(filled, audit_store, capsys) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    _, out = cli(capsys, "runs", "--db", url)
    assert "saved (est.):" not in out  # no run reports usage: nothing estimated
    lg = loop_guard(enabled=True, warningThreshold=3, criticalThreshold=5)
    run = Run(lg, "run-costly", "coder", "gw-1", start_time=START + 3 * 10**6)
    for _ in range(4):
        run.cycle("grep", {"q": "x"}, {"text": "none"})
    audit_store.record_decisions(run.decisions)
    mark = replace(final_watermark(run, "ended"), input_tokens=29_000, tool_calls=4,
                   loop_tokens=14_500, saved_tokens=29_000)  # fmt: skip
    audit_store.record_progress([mark])
    _, out = cli(capsys, "runs", "--db", url)
    row = next(line for line in out.splitlines() if "run-costly" in line)
    assert row.split()[-2:] == ["14500", "29000"]
    assert out.splitlines()[-1] == f"saved (est.): {SAVINGS_METHOD} ({SAVINGS_METHOD_DOC})"


def test_runs_says_when_the_limit_cut_the_list(filled, audit_store, capsys) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    code, out = cli(capsys, "runs", "--db", url, "--limit", "2")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert len(lines) == 4  # header, two runs, the notice
    assert lines[-1] == "showing the newest 2 runs; more match (--limit N shows more)"
    code, out = cli(capsys, "runs", "--db", url, "--limit", "3")
    assert len(out.splitlines()) == 4 and "more match" not in out  # header and all three

    assert main(["runs", "--db", url, "--limit", "2", "--json"]) == EXIT_OK
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and "more match" in err


def test_runs_refuses_a_limit_of_zero(filled, audit_store, capsys) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    with pytest.raises(SystemExit) as exited:
        main(["runs", "--db", url, "--limit", "0"])
    assert exited.value.code == 2
    assert "--limit: expected a number >= 1, got 0" in capsys.readouterr().err


def test_runs_hides_test_loops_unless_asked(filled, audit_store, capsys) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    canary = Run(loop_guard(enabled=True), "canary-1", CANARY_AGENT, "gw-1", start_time=START)
    canary.compaction()
    for _ in range(3):
        canary.cycle("canary_probe", {"probe": True}, {"status": "same"})
    assert canary.decisions
    audit_store.record_decisions(canary.decisions)
    _, out = cli(capsys, "runs", "--db", url)
    assert "canary-1" not in out and "run-repeat" in out
    for flags in (["--all"], ["--agent", CANARY_AGENT]):
        _, out = cli(capsys, "runs", "--db", url, *flags)
        assert "canary-1" in out, flags
    _, out = cli(
        capsys, "runs", "--db", url, "--gateway", "gw-1", "--detector", "post_compaction_guard"
    )
    assert out.splitlines() == [
        f"no runs match but test loops of agent {CANARY_AGENT} (--all shows them)"
    ]


def test_runs_take_human_times(filled, audit_store, capsys) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    middle = format_ms(START + 10**6).replace(" ", "T").removesuffix("Z")  # an ISO date-time
    _, by_iso = cli(capsys, "runs", "--db", url, "--json", "--since", middle)
    _, by_ms = cli(capsys, "runs", "--db", url, "--json", "--since", str(START + 10**6))
    assert by_iso == by_ms and len(by_ms.splitlines()) == 2
    _, recent = cli(capsys, "runs", "--db", url, "--since", "1h")  # the fixtures are from 2023
    assert recent.strip() == "no runs match"
    with pytest.raises(SystemExit):
        main(["runs", "--db", url, "--since", "yesterday-ish"])
    assert "is not a time" in capsys.readouterr().err


# ------------------------------------------------------------------------------- --help


def _subparsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every (command path, parser) below ``parser``, nested ones (``config set``) too."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subparsers(sub, (*path, name))


COMMANDS = [path for path, _ in _subparsers(build_parser())]


def test_every_expected_subcommand_exists() -> None:
    names = {" ".join(path) for path in COMMANDS}
    expected = {"worker", "demo", "history", "runs", "migrate", "replay", "backtest", "export"}
    expected |= {"tail", "doctor"}
    expected |= {"config"}
    assert expected | {"config set", "config rm", "config show"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_help_of_every_subcommand(path, capsys) -> None:
    parser = dict(_subparsers(build_parser()))[path]
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: loopguard {' '.join(path)}")
    assert parser.description, f"{' '.join(path)} --help has no description"
    for action in parser._actions:
        for flag in action.option_strings:
            assert flag in out, f"{' '.join(path)} --help does not mention {flag}"
        if action.option_strings and action.help != argparse.SUPPRESS:
            assert action.help, f"{' '.join(path)} {action.option_strings[0]} has no help text"


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_a_bad_flag_after_a_subcommand_prints_its_usage(path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*path, "--no-such-flag", "x"])
    assert exited.value.code == 2
    usage, *_, error = capsys.readouterr().err.splitlines()
    assert usage.startswith(f"usage: loopguard {' '.join(path)} ")  # its own, not the top's
    assert error.startswith(f"loopguard {' '.join(path)}: error: ")


def test_a_bad_flag_before_the_subcommand_prints_the_top_level_usage(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--no-such-flag", "runs"])
    usage, error = capsys.readouterr().err.splitlines()
    assert usage.startswith("usage: loopguard [-h]")
    assert error == "loopguard: error: unrecognized arguments: --no-such-flag"


def test_a_bad_client_log_level_is_a_clear_error(monkeypatch, capsys) -> None:
    monkeypatch.setenv("LOOPGUARD_CLIENT_LOGLEVEL", "loud")
    assert main(["runs", "--db", "sqlite://"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "LOOPGUARD_CLIENT_LOGLEVEL='loud' is not a log level" in err
    assert "Traceback" not in err
