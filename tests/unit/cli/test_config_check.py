"""``loopguard config check``: a fleet file's resolved blocks with their perTool settings, the
thresholds that cannot fire, and a one-line error naming the field of an invalid file."""

from __future__ import annotations

import json
from pathlib import Path

from streams.cli.common import EXIT_OK, EXIT_USAGE
from streams.cli.main import main
from streams.core.fleet import load_fleet_config

FLEET = """{ tools: { loopDetection: { enabled: true, historySize: 25,
    perTool: { web_fetch: { volatileFields: ["fetchedAt", "data.items.*.fetchedAt"] },
               process: { warningThreshold: 20, criticalThreshold: 40 },
               poll_jobs: { exempt: ["postCompactionGuard", "genericRepeat"] } } } },
  agents: { list: [ { id: "coder", tools: { loopDetection: {
    perTool: { web_fetch: { criticalThreshold: 12 } } } } } ] } }"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "fleet.json5"
    path.write_text(text)
    return str(path)


def test_check_shows_each_blocks_per_tool_settings(tmp_path, capsys):
    path = write(tmp_path, FLEET)
    assert main(["config", "check", path]) == EXIT_OK
    out, err = capsys.readouterr()
    assert err == ""  # the load-time warnings are in the report, not logged twice
    lines = out.splitlines()
    assert lines[0] == f"{path}: valid (1 agent block(s))"
    fleet = load_fleet_config(path)
    version = fleet.for_agent("coder").version
    coder = lines.index(next(line for line in lines if line.startswith("agents.list[id=coder]")))
    assert f'config_version="{version}"' in lines[coder]
    assert (
        "  perTool web_fetch: warningThreshold=10  criticalThreshold=12  exempt=-  "
        "volatileFields=data.items.*.fetchedAt,fetchedAt  ignoredArgs=-  statusResult=false"
    ) in lines[coder:]
    assert "  perTool poll_jobs: warningThreshold=10  criticalThreshold=20  " in out
    assert "exempt=genericRepeat,postCompactionGuard  volatileFields=-" in out
    assert (
        "warning: tools.loopDetection: perTool.process: criticalThreshold 40 is not below "
        "globalCircuitBreakerThreshold 30"
    ) in out


def test_check_json_for_one_agent(tmp_path, capsys):
    path = write(tmp_path, FLEET)
    assert main(["config", "check", path, "--agent", "coder", "--json"]) == EXIT_OK
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1, "--json prints one JSON line (docs/cli.md)"
    doc = json.loads(out)
    assert list(doc["blocks"]) == ["coder"]
    assert doc["blocks"]["coder"]["perTool"]["web_fetch"] == {
        "warningThreshold": 10,
        "criticalThreshold": 12,
        "exempt": [],
        "volatileFields": ["data.items.*.fetchedAt", "fetchedAt"],
        "ignoredArgs": [],
        "statusResult": False,
    }
    assert doc["blocks"]["coder"]["perTool"]["process"]["criticalThreshold"] == 40


def test_an_invalid_file_is_one_line_naming_the_field(tmp_path, capsys):
    path = write(tmp_path, '{tools: {loopDetection: {perTool: {web: {volatileFields: ["a..b"]}}}}}')
    assert main(["config", "check", path]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "tools.loopDetection.perTool.web.volatileFields[0]: malformed JSON path" in err


def check(tmp_path: Path, capsys, text: str) -> tuple[int, str, str]:
    code = main(["config", "check", write(tmp_path, text)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_config_mistakes_are_refused_with_the_key_meant(tmp_path, capsys):
    """Issue 27: each of these printed "valid (0 agent block(s))" and guarded nothing."""
    cases = [
        ("{tool: {loopDetection: {enabled: true}}}", 'tool: not read; did you mean "tools"?'),
        (
            "{tools: {loopDetecton: {enabled: true}}}",
            'tools.loopDetecton: not read; did you mean "loopDetection"?',
        ),
        (
            "{enabled: true, warningThreshold: 3}",
            "config: enabled, warningThreshold at the top level is a bare tools.loopDetection "
            "block; a config file nests it: {tools: {loopDetection: {...}}}",
        ),
        ("{loopDetection: {enabled: true}}", 'did you mean "tools.loopDetection"?'),
        ("{agents: {lists: []}}", 'agents.lists: not read; did you mean "list"?'),
        (
            '{agents: {list: [{id: "a", tools: {LoopDetection: {}}}]}}',
            'agents.list[0].tools.LoopDetection: not read; did you mean "loopDetection"?',
        ),
        (
            "{tools: {loopDetection: {warningTreshold: 3}}}",
            'tools.loopDetection.warningTreshold: unknown field; did you mean "warningThreshold"?',
        ),
        (
            "{tools: {loopDetection: {detectors: {pingpong: false}}}}",
            'tools.loopDetection.detectors.pingpong: unknown field; did you mean "pingPong"?',
        ),
        (
            '{tools: {loopDetection: {compat: "OpenClaw"}}}',
            'tools.loopDetection.compat: expected "loopguard" or "openclaw", got \'OpenClaw\'',
        ),
    ]
    for text, why in cases:
        code, out, err = check(tmp_path, capsys, text)
        assert code == EXIT_USAGE, (text, out)
        assert out == "" and err.count("\n") == 1, err
        assert err.startswith("loopguard config check: invalid config: "), err
        assert why in err, (text, err)


def test_keys_a_gateway_config_has_besides_are_left_alone(tmp_path, capsys):
    """A whole gateway config is a valid fleet file: its other keys, even ones that look like
    ours (OpenClaw's ``agent`` defaults block), are not loopguard's to refuse."""
    text = '{agent: {model: "m"}, tools: {exec: {host: "h"}, loopDetection: {enabled: true}}}'
    code, out, _ = check(tmp_path, capsys, text)
    assert code == EXIT_OK and out.splitlines()[0].endswith(": valid (0 agent block(s))")


def test_check_shows_every_field(tmp_path, capsys):
    text = '{tools: {loopDetection: {enabled: true, compat: "openclaw", abortAfterBlocks: 5}}}'
    code, out, _ = check(tmp_path, capsys, text)
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[1].startswith('tools.loopDetection  config_version="')
    assert lines[2].split() == [
        "unknownToolThreshold=10",
        "abortAfterBlocks=5",
        "errorRepeatThreshold=4",
        "mode=enforce",
        "warnings=log",
        "maxLoopTokens=null",
        "scope=run",
        "sessionFreshTriggers=cron,heartbeat",
        "sessionGapSeconds=0",  # off under compat unless set
        "compat=openclaw",
    ]
    assert "  consecutiveErrors: warningThreshold=5  criticalThreshold=10" in lines
    assert "  postCompactionGuard: windowSize=3  stormThreshold=3" in lines
    assert (
        "  detectors: genericRepeat=true  knownPollNoProgress=true  pingPong=true  "
        "consecutiveErrors=false  errorRepeat=false  compactionStorm=false  "
        "unchangedOutcome=false  repeatedCycle=false  burstRepeat=false  errorAcrossRuns=false"
    ) in lines
    assert "  unchangedOutcome: warningThreshold=5  criticalThreshold=8" in lines
    assert "  repeatedCycle: warningThreshold=3  criticalThreshold=4" in lines
    assert "  burstRepeat: warningThreshold=8  criticalThreshold=16  repeatsPerCall=2" in lines
    assert "  errorAcrossRuns: warningThreshold=3  criticalThreshold=5" in lines
    assert "  deviations: escalateBlocks=false  breakerCountsPingPong=false" in out

    code = main(["config", "check", write(tmp_path, text), "--json"])
    block = json.loads(capsys.readouterr().out)["blocks"]["*"]
    assert block["abortAfterBlocks"] == 5 and block["mode"] == "enforce"
    assert block["deviations"]["maskExecOutput"] is False
    assert set(block) >= {"consecutiveErrors", "errorRepeatThreshold", "postCompactionGuard"}


def test_a_fleet_that_enables_nothing_is_warned_about(tmp_path, capsys):
    code, out, _ = check(tmp_path, capsys, "{tools: {loopDetection: {historySize: 40}}}")
    assert code == EXIT_OK
    assert "warning: enabled is true in no block: the loop detectors are off for every agent" in out
    code, out, _ = check(
        tmp_path,
        capsys,
        '{tools: {loopDetection: {}}, agents: {list: [{id: "a", tools: {loopDetection: '
        "{enabled: true}}}]}}",
    )
    assert "enabled is true in no block" not in out


def test_check_shows_the_args_left_out_of_a_calls_identity_and_the_status_tools(tmp_path, capsys):
    """Issue 44: the built-in knobs and status tools, and what perTool adds or takes away."""
    text = """{tools: {loopDetection: {enabled: true, perTool: {
        exec: {ignoredArgs: ["env.TERM"]}, deploy_status: {statusResult: true},
        session_status: {statusResult: false}}}}}"""
    code, out, _ = check(tmp_path, capsys, text)
    assert code == EXIT_OK
    lines = out.splitlines()
    assert (
        "  ignoredArgs: exec=background,env.TERM,pty,timeout,timeoutSeconds,title,yieldMs  "
        "process=timeout"
    ) in lines
    assert "  statusResults: tools=deploy_status" in lines
    assert any(
        line.startswith("  perTool exec: ")
        and line.endswith("ignoredArgs=env.TERM  statusResult=false")
        for line in lines
    )
    assert any(
        line.startswith("  perTool deploy_status: ") and line.endswith("statusResult=true")
        for line in lines
    )

    code, out, _ = check(tmp_path, capsys, '{tools: {loopDetection: {compat: "openclaw"}}}')
    assert "  ignoredArgs: -" in out.splitlines()  # the reference hashes every arg
    assert "  statusResults: tools=-" in out.splitlines()
    code, out, _ = check(tmp_path, capsys, "{tools: {loopDetection: {}}}")
    assert "  statusResults: tools=session_status" in out.splitlines()

    code, out, err = check(
        tmp_path, capsys, "{tools: {loopDetection: {perTool: {x: {statusResult: 1}}}}}"
    )
    assert code == EXIT_USAGE
    assert "tools.loopDetection.perTool.x.statusResult: expected true or false, got 1" in err
