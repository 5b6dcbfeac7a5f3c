"""The status page's run lines and a run's page with shadow-mode decisions (issue 17): the
worst action of a run nothing enforced carries an "observe only" badge, its status reads
"aborted (observe only)", and each observe-only decision on the run page is marked."""

from __future__ import annotations

import re

from db_fixtures import record_progress

from streams.audit import queries
from streams.audit.store import AuditStore
from streams.core.events import Action, Decision
from streams.web.params import StatusQuery
from streams.web.run_page import render_run
from streams.web.status_page import render_runs_table

T0 = 1_700_000_000_000


def decision(run_id: str, seq: int, action: Action, enforced: bool) -> Decision:
    return Decision(
        run_id, "coder", "gw-1", seq, T0 + seq, action, "generic_repeat",
        "warning" if action is Action.WARN else "critical", seq, "grep", f"{action.value} loop",
        enforced=enforced,
    )  # fmt: skip


def fill(store: AuditStore) -> None:
    for run_id, enforced in (("run-observed", False), ("run-enforced", True)):
        store.record_decisions(
            [
                decision(run_id, 3, Action.WARN, enforced),
                decision(run_id, 5, Action.BLOCK, enforced),
                decision(run_id, 7, Action.ABORT, enforced),
            ]
        )
        record_progress(store, run_id, "coder", 9, T0 + 9, "aborted", 9)


def test_runs_table_marks_a_run_nothing_enforced(audit_store: AuditStore) -> None:
    fill(audit_store)
    lines = queries.grouped_runs(audit_store, queries.Filters())
    html = render_runs_table(lines, len(lines), StatusQuery(), T0 + 10_000)
    rows = dict(re.findall(r'<tr class="run" data-run="([^"]+)">(.*?)</tr>', html, re.S))
    observed, enforced = rows["run-observed"], rows["run-enforced"]
    assert '<span class="badge abort">abort</span> <span class="badge observed">' in observed
    assert "<td>aborted (observe only), 9 events</td>" in observed
    assert 'title="warn/block/abort: 1/1/1, 3 observe-only"' in observed
    assert "observe only" not in enforced and "observe-only" not in enforced
    assert "<td>aborted, 9 events</td>" in enforced


def test_run_page_marks_each_observe_only_decision(audit_store: AuditStore) -> None:
    fill(audit_store)
    page = render_run(queries.run_timeline(audit_store, "run-observed"), app_id="a", now_ms=T0)
    assert re.findall(r'<tr class="decision (\w+ observed)">', page) == [
        "warn observed",
        "block observed",
        "abort observed",
    ]
    assert "<dt>status</dt><dd>aborted (observe only)</dd>" in page
    assert "<dt>observe-only decisions</dt><dd>3 (mode observe: not enforced)</dd>" in page
    assert page.count(", observe only</title>") == 3  # the seq strip's tooltips
    enforced = render_run(queries.run_timeline(audit_store, "run-enforced"), app_id="a", now_ms=T0)
    assert "observe" not in enforced
    assert "<dt>status</dt><dd>aborted</dd>" in enforced
