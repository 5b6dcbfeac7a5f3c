"""One config, one version (issue 41): `config check FILE`, the decisions the workers make
with FILE, `config show` over the workers' file and the file's entry in `config history` all
name the same config version (the history's was a hash of the document, and `config show`
without --config quietly used the built-in defaults)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from core_helpers import Run

from streams.cli.config_commands import effective_versions, versions_base
from streams.cli.main import build_parser, main
from streams.core.engine import LoopGuard
from streams.core.fleet import load_fleet_config
from streams.worker.config_audit import file_change

FLEET = """{ tools: { loopDetection: { enabled: true, warningThreshold: 3,
    incidents: { enabled: true, windowSeconds: 60, minRuns: 3, minAgents: 3 } } },
  agents: { list: [ { id: "coder", tools: { loopDetection: { historySize: 20 } } } ] } }"""


def test_check_decisions_show_and_history_name_one_version(tmp_path: Path, capsys) -> None:
    path = tmp_path / "fleet.json5"
    path.write_text(FLEET)
    assert main(["config", "check", str(path), "--json"]) == 0
    blocks = json.loads(capsys.readouterr().out)["blocks"]
    fleet = load_fleet_config(path)

    # what a worker with this file decides: agents without a block, and coder
    guard = LoopGuard(fleet)
    for agent in ("ops", "coder"):
        run = Run(guard, f"run-{agent}", agent, "gw")
        while not run.decisions:
            run.cycle("grep", {"q": "x"}, {"text": "none"})
        key = "*" if agent == "ops" else agent
        assert {d.config_version for d in run.decisions} == {blocks[key]["config_version"]}

    shown = effective_versions(fleet, {})  # `config show --config FILE`, no overrides
    assert shown["*"] == blocks["*"]["config_version"]
    loaded = file_change(fleet, str(path), "app", 1)  # the file's line in `config history`
    assert loaded.version_after == blocks["*"]["config_version"]


def test_config_show_reads_the_workers_file_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("LOOPGUARD_CONFIG", "/etc/loopguard/fleet.json5")
    args = build_parser().parse_args(["config", "show"])
    assert args.config == "/etc/loopguard/fleet.json5"
    monkeypatch.delenv("LOOPGUARD_CONFIG")
    assert build_parser().parse_args(["config", "show"]).config is None


@pytest.mark.parametrize("config", [None, "fleet.json5"])
def test_config_show_says_what_its_versions_are_over(config: str | None) -> None:
    line = versions_base(config)
    if config:
        assert line == "config versions over fleet.json5"
    else:
        assert line.startswith("config versions over the built-in defaults (no --config")
