"""Shadow mode in the audit trail's reports (issue 17): ``loopguard history`` and ``loopguard
runs`` (text and ``--json``), the status page's run lines and a run's timeline say which
decisions were observe-only, and a run whose abort was only observed is never reported as
plainly aborted (SQLite, and PostgreSQL when configured)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from core_helpers import Run, final_watermark, loop_guard

from streams.audit import queries
from streams.audit.store import AuditStore
from streams.cli.common import EXIT_OK
from streams.cli.main import main
from streams.core.events import Action, Decision

START = 1_700_000_000_000
LOOP = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 4, "abortAfterBlocks": 2}


def looping_run(run_id: str, mode: str, start: int) -> Run:
    """A repeat loop until the core aborts it; under observe the gateway never vetoes."""
    run = Run(loop_guard(**LOOP, mode=mode), run_id, "coder", "gw-1", start_time=start)
    run.start()
    while not any(d.action is Action.ABORT for d in run.decisions):
        run.plain_cycle("grep", {"q": "x"}, {"text": "none"})
    run.plain_cycle("grep", {"q": "x"}, {"text": "none"})  # one more: run_aborted
    return run


def record(store: AuditStore, run: Run, status: str = "aborted") -> None:
    store.record_decisions(run.decisions)
    store.record_progress([final_watermark(run, status)])


@pytest.fixture
def trail(audit_store: AuditStore) -> dict[str, list[Decision]]:
    observed = looping_run("run-observed", "observe", START)
    enforced = looping_run("run-enforced", "enforce", START + 10**6)
    assert observed.lg.runs["run-observed"].status == "aborted"  # the core's own state
    for run in (observed, enforced):
        record(audit_store, run)
    return {"run-observed": observed.decisions, "run-enforced": enforced.decisions}


def cli(capsys, *args: str) -> str:
    assert main(list(args)) == EXIT_OK
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return out


def url_of(store: AuditStore) -> str:
    return store.url.render_as_string(hide_password=False)


def test_history_marks_observe_only_decisions(trail, audit_store, capsys) -> None:
    out = cli(capsys, "history", "run-observed", "--db", url_of(audit_store))
    lines = out.splitlines()[2:]  # under the run's line and the column header
    assert len(lines) == len(trail["run-observed"])
    assert all("[observe only]" in line for line in lines)
    out = cli(capsys, "history", "run-enforced", "--db", url_of(audit_store))
    assert "observe only" not in out
    out = cli(capsys, "history", "run-observed", "--db", url_of(audit_store), "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["enforced"] for row in rows] == [False] * len(trail["run-observed"])
    assert rows == [d.to_dict() for d in trail["run-observed"]]


def test_runs_never_report_an_observed_abort_as_plainly_aborted(trail, audit_store, capsys) -> None:
    out = cli(capsys, "runs", "--db", url_of(audit_store), "--json")
    by_run = {row["run_id"]: row for row in map(json.loads, out.splitlines())}
    observed, enforced = by_run["run-observed"], by_run["run-enforced"]
    assert observed["status"] == "aborted (observe only)"
    assert observed["worst_action"] == "abort" and observed["worst_observed"] is True
    assert observed["observed"] == observed["decisions"] == len(trail["run-observed"])
    assert enforced["status"] == "aborted"
    assert enforced["worst_observed"] is False and enforced["observed"] == 0

    header, *text = cli(capsys, "runs", "--db", url_of(audit_store)).splitlines()
    columns = [header.index(name) for name in ("worst", "observed", "status", "events")]

    def cells(line: str) -> list[str]:  # worst, observed, status: the table's columns
        (worst, observed, status) = (
            line[start:end].split("  ")[0].strip()
            for start, end in zip(columns, columns[1:], strict=False)
        )
        return [worst, observed, status]

    (line,) = [row for row in text if " run-observed " in row]
    assert cells(line) == [
        "abort (observe only)",
        str(len(trail["run-observed"])),
        "aborted (observe only)",
    ]
    (line,) = [row for row in text if " run-enforced " in row]
    assert cells(line) == ["abort", "0", "aborted"]


def test_a_filter_that_hides_the_abort_still_reports_the_run_status_right(
    trail, audit_store
) -> None:
    """The run's status is about the whole run, whatever the decisions a report counts."""
    first_abort = min(d.event_time for d in trail["run-observed"] if d.action is Action.ABORT)
    (observed,) = audit_store.runs(agent="coder", until_ms=first_abort)
    assert observed.run_id == "run-observed" and observed.worst_action is Action.BLOCK
    assert observed.status == "aborted (observe only)" and observed.worst_observed
    (enforced,) = [s for s in audit_store.runs(severity="warning") if s.run_id == "run-enforced"]
    assert enforced.worst_action is Action.WARN and enforced.status == "aborted"


def test_a_run_switched_to_enforce_after_observing_reports_enforced(audit_store) -> None:
    """An agent moved from observe to enforce mid-run: its enforced abort is what counts."""
    observed = looping_run("run-switched", "observe", START)
    *before, last = observed.decisions
    assert last.detector == "run_aborted"  # the call after the observed abort, now enforced
    decisions = [*before, replace(last, enforced=True)]
    audit_store.record_decisions(decisions)
    record(audit_store, observed)
    (summary,) = audit_store.runs()
    assert summary.status == "aborted" and summary.worst_observed is False
    (line,) = queries.grouped_runs(audit_store, queries.Filters())
    assert line.status == "aborted" and line.worst_observed is False


def test_status_page_lines_and_timeline_say_observe_only(trail, audit_store) -> None:
    lines = {line.run_id: line for line in queries.grouped_runs(audit_store, queries.Filters())}
    observed, enforced = lines["run-observed"], lines["run-enforced"]
    assert observed.worst_action == "abort" and observed.worst_observed
    assert observed.status == "aborted (observe only)"
    assert observed.observed == observed.decisions
    assert not enforced.worst_observed and enforced.status == "aborted"
    assert enforced.observed == 0
    timeline = queries.run_timeline(audit_store, "run-observed")
    assert timeline.progress is not None
    assert timeline.progress.status == "aborted (observe only)"
    assert queries.run_timeline(audit_store, "run-enforced").progress.status == "aborted"
