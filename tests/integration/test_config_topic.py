"""``loopguard config set | rm | show`` against a running worker: an override published to the
compacted config topic changes one agent's thresholds without a restart, leaves the other
agents alone, and shows up in the decisions' ``config_version``; invalid blocks are refused
before anything is sent."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from services import ENABLED, Pipeline

from streams.cli.common import EXIT_OK, EXIT_USAGE
from streams.cli.main import main
from streams.core.events import Action, Decision
from streams.core.fleet import fleet_from_document
from streams.gateway.client import GatewayClient

pytestmark = pytest.mark.integration

OVERRIDE = {"enabled": True, "warningThreshold": 3}


def config_cli(capsys, pipeline: Pipeline, *args: str) -> tuple[int, str, str]:
    code = main(
        ["config", *args, "--broker", pipeline.broker.url, "--topic-prefix", pipeline.prefix]
    )
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def wait_for_log(pipeline: Pipeline, text: str, after: int, timeout: float = 30.0) -> int:
    """Wait until the worker log has ``text`` past byte ``after``; returns the new offset."""
    path = pipeline.workers[0].log_path
    deadline = time.monotonic() + timeout
    while True:
        data = path.read_bytes()
        found = data.find(text.encode(), after)
        if found >= 0:
            return found + len(text)
        if time.monotonic() > deadline:
            raise AssertionError(f"worker never logged {text!r}:\n{pipeline.worker_logs()}")
        time.sleep(0.1)


def first_decision(client: GatewayClient, agent: str, cycles: int) -> Decision | None:
    """Repeat one identical tool cycle; the run's first decision (None if there was none)."""
    run = client.start_run(agent)
    for _ in range(cycles):
        run.before_tool("grep", {"q": "loop"})
        run.after_tool("grep", {"q": "loop"}, result={"text": "nothing"})
    run.end()
    try:
        decisions = client.wait_for(run.run_id, lambda ds: len(ds) >= 1, timeout=20)
    except TimeoutError:
        return None
    return min(decisions, key=lambda d: d.seq)


def test_override_applies_without_restart(running_pipeline, capsys, tmp_path: Path) -> None:
    pipeline, client = running_pipeline
    base = fleet_from_document(ENABLED)
    worker_config = str(tmp_path / f"{pipeline.prefix}-config.json")  # Pipeline writes it
    # Before: the file's thresholds (warn on the 11th identical call, count 10).
    before = first_decision(client, "tuned", 11)
    assert before is not None and before.action is Action.WARN and before.count == 10
    assert before.config_version == base.for_agent("tuned").version

    block = tmp_path / "tuned.json5"
    block.write_text("{enabled: true, warningThreshold: 3}  // from an operator")
    log_at = pipeline.workers[0].log_path.stat().st_size
    code, out, _ = config_cli(capsys, pipeline, "set", "tuned", "--file", str(block))
    assert code == EXIT_OK, out
    assert f"override for agent tuned published to {pipeline.prefix}.config" in out
    log_at = wait_for_log(pipeline, "config override for tuned applied", log_at)

    after = first_decision(client, "tuned", 4)
    assert after is not None, "no warning at the override's threshold"
    assert (after.action, after.detector, after.count) == (Action.WARN, "generic_repeat", 3)
    assert after.seq == 8  # run_started, 3 cycles, then the 4th call
    assert after.config_version != before.config_version
    assert after.config_version == base.with_agent("tuned", OVERRIDE).for_agent("tuned").version

    # Another agent still runs on the file's config.
    other = first_decision(client, "untouched", 11)
    assert other is not None and other.count == 10
    assert other.config_version == before.config_version

    code, out, _ = config_cli(capsys, pipeline, "show", "--json", "--config", worker_config)
    assert code == EXIT_OK
    shown = json.loads(out)
    assert shown["overrides"] == {"tuned": OVERRIDE}
    assert shown["config_versions"]["tuned"] == after.config_version
    assert shown["config_versions"]["*"] == before.config_version
    code, out, _ = config_cli(capsys, pipeline, "show")
    assert code == EXIT_OK and "tuned" in out and after.config_version in out

    # Removing the override brings the file's thresholds back, still without a restart.
    # Judged over the workers' file (issue 40): back to its thresholds, nothing weakened.
    code, out, _ = config_cli(capsys, pipeline, "rm", "tuned", "--config", worker_config)
    assert code == EXIT_OK and "removed" in out
    wait_for_log(pipeline, "config override for tuned removed", log_at)
    again = first_decision(client, "tuned", 11)
    assert again is not None and again.count == 10
    assert again.config_version == before.config_version
    code, out, _ = config_cli(capsys, pipeline, "show", "--json")
    assert json.loads(out)["overrides"] == {}


def test_global_override_round_trip(running_pipeline, capsys, tmp_path: Path) -> None:
    pipeline, _client = running_pipeline
    block = tmp_path / "global.yaml"
    block.write_text("tools:\n  loopDetection:\n    enabled: true\n    warningThreshold: 6\n")
    code, out, _ = config_cli(capsys, pipeline, "set", "*", "--file", str(block))
    assert code == EXIT_OK, out
    assert "override for the global block published" in out
    code, out, _ = config_cli(capsys, pipeline, "show", "--json")
    shown = json.loads(out)
    assert shown["overrides"] == {"*": {"enabled": True, "warningThreshold": 6}}
    expected = fleet_from_document({"tools": {"loopDetection": shown["overrides"]["*"]}})
    assert shown["config_versions"]["*"] == expected.for_agent("any").version
    # Over the built-in defaults, removing it would switch the rolling detectors off: a
    # weakening the CLI refuses (issue 40); over the workers' file it weakens nothing.
    code, _out, err = config_cli(capsys, pipeline, "rm", "*")
    assert code == 2 and "GUARDING WEAKENED for *" in err
    worker_config = str(tmp_path / f"{pipeline.prefix}-config.json")  # Pipeline writes it
    code, out, _ = config_cli(capsys, pipeline, "rm", "*", "--config", worker_config)
    assert code == EXIT_OK
    code, out, _ = config_cli(capsys, pipeline, "show")
    assert code == EXIT_OK and out.startswith(f"no overrides on {pipeline.prefix}.config")


INVALID = [
    (
        "tuned",
        '{"warningThreshold": "three"}',
        "agents.list[id=tuned].tools.loopDetection.warningThreshold: expected a whole number",
    ),
    (
        "tuned",
        '{"detectors": {"pingPong": 1}}',
        "agents.list[id=tuned].tools.loopDetection.detectors.pingPong: expected true or false",
    ),
    ("*", '{"historySize": 0}', "tools.loopDetection.historySize: must be at least 1"),
    ("*", '{"tools": {"loopDetection": {"bogus": 1}}}', "tools.loopDetection.bogus: unknown field"),
    ("tuned", '{"agents": {"list": []}}', "not a whole fleet config"),
    ("tuned", "[1, 2]", "expected an object, got list"),
    ("tuned", "{warningThreshold: ", "not valid JSON5"),
    (" ", '{"enabled": true}', "agent id ' ': must be non-empty"),
]


@pytest.mark.parametrize("agent, text, message", INVALID)
def test_invalid_override_is_refused_with_the_field_path(
    agent: str, text: str, message: str, capsys, tmp_path: Path
) -> None:
    block = tmp_path / "block.json"
    block.write_text(text)
    # Validation happens before any broker contact: this broker does not exist.
    code = main(["config", "set", agent, "--file", str(block), "--broker", "kafka://127.0.0.1:9"])
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE, out + err
    assert message in err and "invalid override" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_missing_override_file_is_a_usage_error(capsys, tmp_path: Path) -> None:
    code = main(["config", "set", "tuned", "--file", str(tmp_path / "nope.json")])
    _, err = capsys.readouterr()
    assert code == EXIT_USAGE and "nope.json: cannot read" in err
