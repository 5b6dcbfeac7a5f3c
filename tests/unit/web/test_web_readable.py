"""The status page for people (issue 41): no raw JSON (the worker's health sections, a config
change's value, a decision's extra fields), the test loops hidden as `loopguard runs` hides
them (with a link that shows them), and the saved-tokens figure marked as an estimate with
its method named."""

from __future__ import annotations

import html
import json
import re

from streams.audit.canary import CANARY_AGENT
from streams.audit.queries import Overview, run_timeline
from streams.audit.store import AuditStore
from streams.core.config_change import FILE_KEY, LOADED, SOURCE_FILE, ConfigChange
from streams.core.events import Action, Decision
from streams.core.usage import SAVINGS_METHOD, SAVINGS_METHOD_DOC
from streams.web.params import status_query
from streams.web.run_page import render_run
from streams.web.status_page import (
    load_status,
    loop_cost_items,
    render_config_card,
    render_status,
    render_worker_card,
)

NOW = 1_800_000_000_000
JSON_LIKE = re.compile(r'[{}\[\]]|&quot;|"\w+": ')


def decision(run_id: str, agent: str, seq: int = 3, **over: object) -> Decision:
    values: dict[str, object] = dict(
        run_id=run_id, agent_id=agent, gateway_id="gw", seq=seq, event_time=NOW - 60_000,
        action=Action.ABORT, detector="post_compaction_guard", severity="critical", count=3,
        tool_name="canary_probe", reason="same call after compaction",
    )  # fmt: skip
    values.update(over)
    return Decision(**values)  # type: ignore[arg-type]


def test_the_worker_card_shows_health_sections_as_fields_not_json() -> None:
    health = {
        "status": "ok",
        "processing": {"status": "ok", "last_event_age_seconds": 87.3, "consumer_lag": 0},
        "audit": {"status": "ok", "last_write_age_seconds": 8.8, "pending_seconds": None,
                  "backlog": 0, "last_error": None, "quarantined": 0},
    }  # fmt: skip
    card = render_worker_card(None, health, NOW)
    assert not JSON_LIKE.search(card), card
    assert "<dt>processing</dt><dd>status ok · last event 87.3 s ago · consumer lag 0</dd>" in card
    audit = "status ok · last write 8.8 s ago · backlog 0 · quarantined 0"
    assert f"<dt>audit</dt><dd>{audit}</dd>" in card  # unset fields left out


def test_the_config_card_shows_a_files_settings_not_its_json() -> None:
    document = {
        "agents": {"list": [{"id": "coder", "tools": {"loopDetection": {"mode": "observe"}}}]},
        "tools": {"loopDetection": {"enabled": True, "sessionFreshTriggers": ["cron"]}},
    }
    change = ConfigChange(
        change_id="file:x", source=SOURCE_FILE, action=LOADED, agent_key=FILE_KEY,
        value=json.dumps(document), changed_at=NOW, version_after="c9b69255e2faae0d",
    )  # fmt: skip
    card = render_config_card(change, NOW)
    assert not JSON_LIKE.search(card.replace("[0]", "")), card
    assert "agents.list[0].id=coder; agents.list[0].tools.loopDetection.mode=observe" in card
    assert "tools.loopDetection.enabled=true; tools.loopDetection.sessionFreshTriggers=cron" in card


def test_the_saved_estimate_says_est_and_names_its_method() -> None:
    items = dict(loop_cost_items(Overview(5, 0, 5, NOW, 157_950, 291_600, usage_runs=1)))
    saved = items["saved by block/abort (est.)"]
    assert '<span id="saved-tokens">291,600</span> tokens' in saved
    assert html.escape(SAVINGS_METHOD) in saved and html.escape(SAVINGS_METHOD_DOC) in saved


def page(store: AuditStore, **query: str) -> str:
    q = status_query(query)
    data = load_status(store, q, NOW)
    return render_status(
        data, q, app_id="w", db_url="sqlite://", db_error=None, snapshot=None, health={},
        now_ms=NOW,
    )  # fmt: skip


def runs_on(html: str) -> list[str]:
    return re.findall(r'<tr class="run" data-run="([^"]+)"', html)


def test_the_test_loops_are_hidden_as_runs_hides_them(audit_store: AuditStore) -> None:
    audit_store.record_decisions(
        [decision("canary-1", CANARY_AGENT), decision("work-1", "coder", tool_name="exec")]
    )
    shown = page(audit_store)
    assert runs_on(shown) == ["work-1"]
    assert 'id="runs-count">1\nruns' in shown
    link = re.search(r'<a id="show-test-loops" href="([^"]+)">1 test loop of ([^<]+) hidden', shown)
    assert link and link.group(1) == "/status?testloops=1" and link.group(2) == CANARY_AGENT
    assert "canary_probe" not in shown  # nor in the top tools, nor the chart's counts
    assert sorted(runs_on(page(audit_store, testloops="1"))) == ["canary-1", "work-1"]
    assert runs_on(page(audit_store, agent=CANARY_AGENT)) == ["canary-1"]
    assert "show-test-loops" not in page(audit_store, testloops="1")


def test_a_decisions_extra_fields_show_as_fields(audit_store: AuditStore) -> None:
    audit_store.record_decisions([decision("run-x", "coder", extra={"blocks_before": 3})])
    html = render_run(run_timeline(audit_store, "run-x"), app_id="w", now_ms=NOW)
    assert "blocks before 3" in html and "&quot;blocks_before&quot;" not in html
