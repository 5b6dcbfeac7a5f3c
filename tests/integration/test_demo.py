"""``loopguard demo`` as a new user meets it: run twice in one folder, the same text each time.

The demo always runs on the embedded tansu broker (its own, started by the demo), so this test
runs whenever tansu is among ``LOOPGUARD_TEST_BROKER``'s brokers and takes no broker fixture.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from services import chosen_brokers

from streams.audit.store import AuditStore

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif("tansu" not in chosen_brokers(), reason="the demo runs on tansu"),
]

DEMO_TIMEOUT = 300  # seconds per run; a run takes about 25 s
TAG = re.compile(r"^== run normal-([0-9a-f]{6}) ", re.MULTILINE)
# What the pure core decides on the demo's runs, with the gateway obeying in time.
EXPECTED = {"normal": 0, "pingpong": 13, "compact": 1, "failing": 8, "retry": 3, "storm": 1}
# Loops between agents (issue 28): each run of the triangle warned twice, then blocked.
EXPECTED.update({"planner": 3, "researcher": 3, "reviewer": 3})


def run_demo(folder: Path) -> tuple[str, str]:
    """One ``loopguard demo`` in ``folder``: its stdout and its run tag."""
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "demo"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
    )
    assert done.returncode == 0, f"demo failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    match = TAG.search(done.stdout)
    assert match, done.stdout
    return done.stdout, match.group(1)


def hint_commands(text: str) -> list[list[str]]:
    """The commands printed under the closing hint, split as a shell would."""
    hint = text.split("query the audit trail (from this folder):\n", 1)[1]
    return [shlex.split(line) for line in hint.splitlines() if line.startswith("  ")]


def test_the_demo_prints_the_same_text_twice_and_keeps_both_runs(tmp_path: Path) -> None:
    first, first_tag = run_demo(tmp_path)
    second, second_tag = run_demo(tmp_path)

    # Fresh run ids each time; apart from them, not one character differs.
    assert first_tag != second_tag
    assert first.replace(first_tag, "TAG") == second.replace(second_tag, "TAG")

    # What it prints is what the detector core decides, under each run's own heading.
    sections = first.split("\n== ")
    assert sections[1].startswith(f"run normal-{first_tag} ") and "no decisions" in sections[1]
    assert sections[2].startswith(f"run pingpong-{first_tag} ")
    assert sections[2].count(" WARN ") == 10 and sections[2].count(" BLOCK ") == 2
    assert sections[2].count("gateway refused") == 2
    assert sections[2].count(" ABORT ") == 1 and "loop_persisted_after_block" in sections[2]
    assert sections[3].startswith(f"run compact-{first_tag} ")
    assert sections[3].count(" ABORT ") == 1
    assert sections[3].count("compaction_loop_persisted") == 1  # the error code, once
    assert sections[4].startswith(f"run failing-{first_tag} ")
    assert sections[4].count(" WARN   consecutive_errors") == 5
    assert sections[4].count(" BLOCK  consecutive_errors") == 2
    assert sections[4].count(" ABORT  consecutive_errors") == 1
    assert sections[5].startswith(f"run retry-{first_tag} ")
    assert sections[5].count(" BLOCK  error_repeat (count 4)") == 1
    assert sections[5].count(" ABORT  error_repeat") == 1
    assert sections[6].startswith(f"run storm-{first_tag} ")
    # The error code is left out where it only repeats the detector's name.
    assert sections[6].count(" ABORT  compaction_storm (count 3)\n") == 1
    assert "compaction_storm (count 3): compaction_storm" not in sections[6]
    triangle = sections[7]
    assert triangle.startswith(f"runs planner-{first_tag}, researcher-{first_tag}, reviewer-")
    assert triangle.count(" WARN   agent_cycle") == 6 and triangle.count(" BLOCK  agent_cycle") == 3
    assert "reviewer → planner → researcher → reviewer" in triangle
    assert triangle.count("gateway refused sessions_send") == 1
    sections = [*sections[:7], *sections[8:]]  # the summary is next, as before
    assert "35 decisions: what the detector core decides on these events" in sections[7]
    assert "loopguard-data/demo-config.json" in first  # it names its config file
    assert "readiness" not in first  # no jargon: it says what it did
    # One numbering: the summary names the seq of the abort its run printed.
    for section in sections[2:7]:
        run_id = section.split()[1]
        abort = re.search(r"^  seq +(\d+)  ABORT ", section, re.MULTILINE)
        assert abort, section
        assert f"{run_id} " in sections[7] and f"stopped at seq {abort.group(1)}:" in next(
            line for line in sections[7].splitlines() if line.strip().startswith(run_id)
        )
    assert "before call" not in first

    # The second run's decisions were recorded, not dropped as duplicates of the first's.
    with AuditStore(f"sqlite:///{tmp_path / 'loopguard-data' / 'audit.db'}") as store:
        for tag in (first_tag, second_tag):
            rows = {name: len(store.history(f"{name}-{tag}")) for name in EXPECTED}
            assert rows == EXPECTED, tag

    # The closing hint works as printed: the running interpreter's loopguard, from this folder.
    history, runs = hint_commands(second)
    assert history[1:] == ["history", f"pingpong-{second_tag}"] and runs[1:] == ["runs"]
    assert Path(history[0]) == Path(sys.executable).parent / "loopguard"
    assert Path(history[0]).is_file()
    shown = run_command(history, tmp_path).splitlines()
    assert shown[0].startswith(f"run pingpong-{second_tag} (agent coder, gateway demo-gw): 13 ")
    assert len(shown) == 2 + EXPECTED["pingpong"], shown  # the run, a header, its decisions
    listed = run_command(runs, tmp_path)
    assert f"pingpong-{first_tag}" in listed and f"pingpong-{second_tag}" in listed
    assert "canary-" not in listed  # the readiness test loops are hidden by default
    assert "canary-" in run_command([*runs, "--all"], tmp_path)

    # Each demo's logs are its own: the second run rewrote them.
    worker_log = (tmp_path / "loopguard-data" / "worker.log").read_text(errors="replace")
    assert worker_log.count("| id          | loopguard") == 1


def run_command(command: list[str], folder: Path) -> str:
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{shlex.join(command)}: {done.stderr}"
    return done.stdout
