"""``loopguard config check`` (issue 41): every error of an invalid file in one run, one line
each (three typos are three lines, not three runs), and every threshold the config's rules
raised said in the report, so the file's author sees what they got."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.cli.common import EXIT_OK, EXIT_USAGE
from streams.cli.main import main

PREFIX = "loopguard config check: invalid config: "


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *flags: str):
    path = tmp_path / "fleet.json5"
    path.write_text(text)
    code = main(["config", "check", str(path), *flags])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_three_typos_are_three_lines_of_one_run(tmp_path, capsys) -> None:
    code, out, err = check(
        tmp_path,
        capsys,
        "{tools: {loopDetection: {enabled: true, warningThresold: 5, criticalTreshold: 9, "
        "detectors: {pingPog: false}}}}",
    )
    assert code == EXIT_USAGE and out == ""
    lines = err.splitlines()
    assert [line.removeprefix(PREFIX).split(":")[0] for line in lines] == [
        "tools.loopDetection.warningThresold",
        "tools.loopDetection.criticalTreshold",
        "tools.loopDetection.detectors.pingPog",
    ]
    assert all(line.startswith(PREFIX) for line in lines)
    assert 'did you mean "warningThreshold"?' in lines[0]
    assert 'did you mean "pingPong"?' in lines[2]


def test_errors_in_agent_blocks_lists_and_dotted_tool_names_are_all_found(tmp_path, capsys):
    text = """{ tools: { loopDetection: {
        perTool: { "mcp.search": { warningThreshhold: 4 }, exec: { exempt: ["pingpong"] } } } },
      agents: { list: [
        { id: "coder", tools: { loopDetection: { mode: "watch", historySize: 0 } } },
        { id: 7 },
        { id: "ops", tools: { loopDetection: { incidents: { enabled: true } } } } ] } }"""
    code, _, err = check(tmp_path, capsys, text)
    assert code == EXIT_USAGE
    assert [line.removeprefix(PREFIX).split(": ")[0] for line in err.splitlines()] == [
        "tools.loopDetection.perTool.mcp.search.warningThreshhold",
        "tools.loopDetection.perTool.exec.exempt[0]",
        "agents.list[0].tools.loopDetection.mode",
        "agents.list[0].tools.loopDetection.historySize",
        "agents.list[1].id",  # the entries after it keep their index
        "agents.list[2].tools.loopDetection.incidents",
    ]


def test_json_reports_every_error_in_one_object(tmp_path, capsys) -> None:
    code, out, err = check(
        tmp_path, capsys, "{tools: {loopDetection: {mode: 1, scope: 2}}}", "--json"
    )
    assert code == EXIT_USAGE and len(out.splitlines()) == 1
    doc = json.loads(out)
    assert doc["valid"] is False and len(doc["errors"]) == 2
    assert doc["errors"][1] == 'tools.loopDetection.scope: expected "run" or "session", got 2'
    assert err.splitlines() == [PREFIX + e for e in doc["errors"]]


def test_a_file_that_does_not_parse_is_its_one_error(tmp_path, capsys) -> None:
    code, out, err = check(tmp_path, capsys, "{tools: {loopDetection: {enabled: tru")
    assert code == EXIT_USAGE and out == "" and len(err.splitlines()) == 1
    assert "not valid" in err


def test_the_report_says_which_thresholds_were_raised(tmp_path, capsys) -> None:
    text = """{tools: {loopDetection: {enabled: true, historySize: 50, warningThreshold: 25,
        consecutiveErrors: {warningThreshold: 12},
        perTool: {exec: {warningThreshold: 40}, web: {warningThreshold: 3, criticalThreshold: 2}}}},
      agents: {list: [{id: "coder", tools: {loopDetection: {criticalThreshold: 45}}}]}}"""
    code, out, _ = check(tmp_path, capsys, text)
    assert code == EXIT_OK
    raised = [line for line in out.splitlines() if line.startswith("  raised: ")]
    assert raised == [
        # the global block: the default critical (20) under the file's warning (25)
        "  raised: criticalThreshold 20 raised to 26 (above warningThreshold 25)",
        "  raised: consecutiveErrors.criticalThreshold 10 raised to 13 "
        "(above consecutiveErrors.warningThreshold 12)",
        "  raised: perTool.exec.criticalThreshold 26 (the block's) raised to 41 "
        "(above perTool.exec.warningThreshold 40)",
        "  raised: perTool.web.criticalThreshold 2 raised to 4 "
        "(above perTool.web.warningThreshold 3)",
        # coder: its critical (45) is above the breaker (30), which is raised to 46; exec's
        # critical is the block's 45 now, above its warning: nothing to raise there
        "  raised: globalCircuitBreakerThreshold 30 raised to 46 (above criticalThreshold 45)",
        "  raised: consecutiveErrors.criticalThreshold 10 raised to 13 "
        "(above consecutiveErrors.warningThreshold 12)",
        "  raised: perTool.web.criticalThreshold 2 raised to 4 "
        "(above perTool.web.warningThreshold 3)",
    ]
    code, out, _ = check(tmp_path, capsys, text, "--json")
    doc = json.loads(out)
    assert doc["raised"]["*"][0] == "criticalThreshold 20 raised to 26 (above warningThreshold 25)"
    assert len(doc["raised"]["coder"]) == 3


def test_nothing_raised_says_nothing(tmp_path, capsys) -> None:
    code, out, _ = check(tmp_path, capsys, "{tools: {loopDetection: {enabled: true}}}")
    assert code == EXIT_OK and "  raised: " not in out
    code, out, _ = check(tmp_path, capsys, "{tools: {loopDetection: {enabled: true}}}", "--json")
    assert json.loads(out)["raised"] == {"*": []}


def test_the_report_shows_the_agents_run_budget(tmp_path, capsys) -> None:
    text = "{tools: {loopDetection: {enabled: true, runBudget: {calls: 50}}}}"
    code, out, _ = check(tmp_path, capsys, text)
    assert code == EXIT_OK and "  runBudget: calls=50  tokens=null" in out.splitlines()
    code, out, _ = check(tmp_path, capsys, text, "--json")
    assert json.loads(out)["blocks"]["*"]["runBudget"] == {"calls": 50, "tokens": None}
