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
        "volatileFields=data.items.*.fetchedAt,fetchedAt"
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
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["blocks"]) == ["coder"]
    assert doc["blocks"]["coder"]["perTool"]["web_fetch"] == {
        "warningThreshold": 10,
        "criticalThreshold": 12,
        "exempt": [],
        "volatileFields": ["data.items.*.fetchedAt", "fetchedAt"],
    }
    assert doc["blocks"]["coder"]["perTool"]["process"]["criticalThreshold"] == 40


def test_an_invalid_file_is_one_line_naming_the_field(tmp_path, capsys):
    path = write(tmp_path, '{tools: {loopDetection: {perTool: {web: {volatileFields: ["a..b"]}}}}}')
    assert main(["config", "check", path]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "tools.loopDetection.perTool.web.volatileFields[0]: malformed JSON path" in err
