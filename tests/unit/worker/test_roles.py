"""Worker roles (issue 42): what each role's worker is built with (agents, tables, web pages,
consumer group), each built in a fresh interpreter (the Faust layer patches a process once),
and the role's one setting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streams.settings import Settings

BUILD = """
import json, sys
from streams.settings import Settings
from streams.worker.bootstrap import build_worker
settings = Settings.for_profile(
    "tansu", role=sys.argv[1], broker="kafka://127.0.0.1:1", data_dir=sys.argv[2],
    web_enabled=True,
)
app = build_worker(settings)
print(json.dumps({
    "group": app.conf.id,
    "agents": sorted(app.agents),
    "tables": sorted(app.tables),
    "pages": sorted(app.web.views),
}))
"""


def built(role: str, tmp_path: Path) -> dict:
    """The worker ``role`` builds (nothing connects to a broker before the app starts)."""
    done = subprocess.run(
        [sys.executable, "-c", BUILD, role, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_all_runs_the_guard_and_the_audit_in_one_group(tmp_path: Path) -> None:
    worker = built("all", tmp_path)
    assert worker["group"] == "loopguard"
    assert worker["agents"] == [
        "audit_dead_letters",
        "audit_decisions",
        "guard_agent_cycles",
        "guard_runs",
    ]
    assert worker["tables"] == ["agent-cycles", "runs", "sessions"]
    assert "/status" in worker["pages"] and "/healthz" in worker["pages"]


def test_a_guard_runs_the_guarding_agent_its_tables_and_health_only(tmp_path: Path) -> None:
    worker = built("guard", tmp_path)
    assert worker["group"] == "loopguard"  # the same group, offsets and state as "all"
    assert worker["agents"] == ["guard_runs"]
    assert worker["tables"] == ["runs", "sessions"]
    assert worker["pages"] == ["/healthz", "/metrics"]


def test_an_audit_worker_runs_everything_else_in_a_group_of_its_own(tmp_path: Path) -> None:
    worker = built("audit", tmp_path)
    assert worker["group"] == "loopguard-audit"
    assert worker["agents"] == ["audit_dead_letters", "audit_decisions", "guard_agent_cycles"]
    assert worker["tables"] == ["agent-cycles"]
    assert "/status" in worker["pages"] and "/runs" in worker["pages"]


def test_the_role_comes_from_loopguard_role_and_names_the_group(monkeypatch) -> None:
    assert Settings.from_env().role == "all"
    monkeypatch.setenv("LOOPGUARD_ROLE", "audit")
    monkeypatch.setenv("LOOPGUARD_APP_ID", "fleet")
    settings = Settings.from_env()
    assert (settings.role, settings.group_id, settings.guards, settings.audits) == (
        "audit",
        "fleet-audit",
        False,
        True,
    )
    monkeypatch.setenv("LOOPGUARD_ROLE", "auditor")
    with pytest.raises(ValueError, match="LOOPGUARD_ROLE='auditor' is not a worker role"):
        Settings.from_env()
