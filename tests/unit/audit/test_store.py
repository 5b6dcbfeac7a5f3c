"""Audit trail against real databases (SQLite file + PostgreSQL via tests/db_fixtures.py)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import inspect, select, text

from streams.audit.database import MIGRATIONS_DIR, alembic_config, migrate
from streams.audit.models import Base, DeadLetter
from streams.audit.store import AuditStore, RunProgress
from streams.core.events import Action, Decision
from streams.wire.avro import RunWatermark

REPO = Path(__file__).resolve().parents[3]
AUDIT_TABLES = {"decisions", "dead_letters", "processed_events", "webhook_deliveries"}
AUDIT_TABLES |= {"run_usage"}  # issue 28: tokens per run
AUDIT_TABLES |= {"audit_quarantine"}  # issue 26: records the database refused for their data
AUDIT_TABLES |= {"config_changes"}  # issue 26: every config change, with its sender
AUDIT_TABLES |= {"incidents"}  # issue 28: loop incidents
AUDIT_TABLES |= {"operator_releases"}  # issue 43: who released or aborted a run, and why
DECISION_INDEXES = {
    "ix_decisions_run_id_seq",
    "ix_decisions_agent_id",
    "ix_decisions_gateway_id",
    "ix_decisions_detector",
    "ix_decisions_event_time",
}
HOSTILE = "x'; DROP TABLE decisions; --"
_unique = itertools.count()
# Property tests on the audit_store fixture: one store for all of a test's examples (each
# example keeps to rows of its own), and a database round trip has no deadline.
ON_THE_STORE = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def make_decision(**overrides: Any) -> Decision:
    values: dict[str, Any] = {
        "run_id": "run-1",
        "agent_id": "agent-a",
        "gateway_id": "gw-1",
        "seq": 1,
        "event_time": 1_700_000_000_000,
        "action": Action.WARN,
        "detector": "repeat",
        "severity": "warning",
        "count": 3,
        "tool_name": "search",
        "reason": "same call repeated",
    }
    values.update(overrides)
    return Decision(**values)


def head_revision() -> str:
    head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
    assert head is not None
    return head


def current_revision(store: AuditStore) -> str | None:
    with store.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


# -- migrations ---------------------------------------------------------------------------


def test_migrations_create_schema_and_downgrade_drops_it(db_url: str) -> None:
    with AuditStore(db_url) as store:
        assert set(inspect(store.engine).get_table_names()) == set()

        migrate(db_url)
        insp = inspect(store.engine)
        assert set(insp.get_table_names()) == AUDIT_TABLES | {"alembic_version"}
        assert {ix["name"] for ix in insp.get_indexes("decisions")} >= DECISION_INDEXES
        uniques = {
            uc["name"]: uc["column_names"]
            for table in ("decisions", "dead_letters")
            for uc in insp.get_unique_constraints(table)
        }
        assert uniques["uq_decisions_decision_id"] == ["decision_id"]
        assert uniques["uq_dead_letters_source_position"] == ["source_topic", "partition", "offset"]
        assert insp.get_pk_constraint("processed_events")["constrained_columns"] == ["run_id"]
        assert current_revision(store) == head_revision()

        command.downgrade(alembic_config(db_url), "base")
        assert set(inspect(store.engine).get_table_names()) <= {"alembic_version"}
        assert current_revision(store) is None

        store.migrate()  # and back up again
        assert set(inspect(store.engine).get_table_names()) >= AUDIT_TABLES


def test_migrate_is_idempotent_and_independent_of_cwd(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # nowhere near alembic.ini or migrations/
    with AuditStore(db_url) as store:
        store.migrate()
        store.record_decision(make_decision())
        store.migrate()
        assert current_revision(store) == head_revision()
        assert store.decision_count() == 1


def test_models_match_migrations(audit_store: AuditStore) -> None:
    """The ORM models and the hand-written migration must describe the same schema."""
    with audit_store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, Base.metadata) == []


def test_alembic_cli_uses_ini_and_env_url(db_url: str, tmp_path: Path) -> None:
    """``alembic -c alembic.ini`` works from any cwd, taking the URL from LOOPGUARD_DB_URL."""
    env = {**os.environ, "LOOPGUARD_DB_URL": db_url}
    alembic = [sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini")]
    subprocess.run([*alembic, "upgrade", "head"], cwd=tmp_path, env=env, check=True)
    with AuditStore(db_url) as store:
        assert set(inspect(store.engine).get_table_names()) >= AUDIT_TABLES
        subprocess.run([*alembic, "downgrade", "base"], cwd=tmp_path, env=env, check=True)
        assert not AUDIT_TABLES & set(inspect(store.engine).get_table_names())


def test_default_url_is_embedded_sqlite_with_a_rollback_journal_and_no_mmap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with AuditStore() as store:
        store.migrate()
        assert (tmp_path / "loopguard-data" / "audit.db").is_file()
        with store.engine.connect() as conn:
            # No WAL: its mmap'd -shm index turns a failing disk into SIGBUS (issue 26).
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "delete"
            assert conn.execute(text("PRAGMA mmap_size")).scalar() == 0
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 5000


def test_unsupported_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        AuditStore("mysql://user@localhost/db")


# -- decisions ----------------------------------------------------------------------------


def test_record_decisions_is_idempotent(audit_store: AuditStore) -> None:
    batch = [make_decision(seq=n) for n in range(3)]
    assert audit_store.record_decisions(batch) == 3
    assert audit_store.record_decisions(batch) == 0  # redelivered batch
    assert audit_store.decision_count() == 3

    # overlapping batch, with a duplicate inside the batch itself
    more = [batch[0], make_decision(seq=7), make_decision(seq=7), make_decision(seq=8)]
    assert audit_store.record_decisions(more) == 2
    assert audit_store.decision_count() == 5

    assert audit_store.record_decision(make_decision(seq=9)) is True
    assert audit_store.record_decision(make_decision(seq=9, reason="changed")) is False
    assert audit_store.record_decisions([]) == 0
    assert audit_store.decision_count() == 6
    assert audit_store.history("run-1")[-1].reason == "same call repeated"  # first write wins


def test_large_batches_span_insert_pages(audit_store: AuditStore) -> None:
    """Big batches are split into several multi-row INSERTs; the new-row count must hold."""
    first = [make_decision(seq=n) for n in range(2_500)]
    assert audit_store.record_decisions(first) == 2_500
    overlapping = [make_decision(seq=n) for n in range(1_250, 3_750)]
    assert audit_store.record_decisions(overlapping) == 1_250
    assert audit_store.decision_count() == 3_750
    assert [d.seq for d in audit_store.history("run-1")] == list(range(3_750))


def test_same_event_different_detector_or_action_are_distinct(audit_store: AuditStore) -> None:
    batch = [
        make_decision(seq=5, detector="repeat"),
        make_decision(seq=5, detector="ping_pong"),
        make_decision(seq=5, detector="repeat", action=Action.BLOCK),
    ]
    assert audit_store.record_decisions(batch) == 3


def test_history_is_ordered_and_round_trips(audit_store: AuditStore) -> None:
    run = "rün-🌀-1"
    expected = [
        make_decision(run_id=run, seq=1, detector="repeat", tool_name="søk"),
        make_decision(run_id=run, seq=2, detector="ping_pong", paired_tool_name="fetch"),
        make_decision(
            run_id=run,
            seq=2,
            detector="repeat",
            action=Action.ABORT,
            severity="critical",
            count=12,
            reason="模型 keeps calling — «search» ×12",
            args_hash="a" * 64,
            result_hash="b" * 64,
            error_code="E_TIMEOUT",
            config_version="v3",
            extra={"window": [1, 2, 3], "ratio": 0.25, "nested": {"ключ": "值", "ok": True}},
        ),
        make_decision(run_id=run, seq=10, detector="no_progress", action=Action.BLOCK),
    ]
    # stored out of order and split across batches; seq 2 pair keeps insertion order
    audit_store.record_decisions([expected[3], expected[1]])
    audit_store.record_decisions([expected[2], expected[0]])
    audit_store.record_decision(make_decision(run_id="other-run"))

    history = audit_store.history(run)
    assert [(d.seq, d.detector) for d in history] == [
        (1, "repeat"),
        (2, "ping_pong"),
        (2, "repeat"),
        (10, "no_progress"),
    ]
    assert sorted(history, key=lambda d: d.decision_id) == sorted(
        expected, key=lambda d: d.decision_id
    )
    abort = next(d for d in history if d.action is Action.ABORT)
    assert abort == expected[2]
    assert isinstance(abort.action, Action)
    assert audit_store.history("no-such-run") == []


_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)
_json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
_json = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)


@settings(ON_THE_STORE, max_examples=30)
@given(
    template=st.builds(
        make_decision,
        agent_id=_text,
        gateway_id=_text,
        seq=st.integers(0, 2**62),
        event_time=st.integers(0, 2**62),
        action=st.sampled_from(Action),
        detector=_text,
        severity=st.sampled_from(["warning", "critical"]),
        count=st.integers(0, 2**31 - 1),
        tool_name=_text,
        reason=_text,
        args_hash=_text,
        extra=st.dictionaries(_text, _json, max_size=4),
    ),
    run_suffix=_text,
)
def test_any_decision_round_trips(
    audit_store: AuditStore, template: Decision, run_suffix: str
) -> None:
    decision = replace(template, run_id=f"r{next(_unique)}{run_suffix}")
    assert audit_store.record_decision(decision)
    assert audit_store.history(decision.run_id) == [decision]


# -- dead letters -------------------------------------------------------------------------


def test_dead_letters_are_counted_once(audit_store: AuditStore) -> None:
    payload = b"\x00\xff not json \x80"
    assert audit_store.record_dead_letter("agent-events", 0, 41, "bad json", payload, b"k")
    assert not audit_store.record_dead_letter("agent-events", 0, 41, "retried", payload, b"k")
    assert audit_store.dead_letter_count() == 1

    assert audit_store.record_dead_letter("agent-events", 1, 41, "other partition", b"", None)
    assert audit_store.record_dead_letter("agent-events", 0, 42, "next offset", b"x", None)
    assert audit_store.record_dead_letter(HOSTILE, 0, 41, "other topic", b"y")
    assert audit_store.dead_letter_count() == 4

    with audit_store.engine.connect() as conn:
        row = conn.execute(
            select(DeadLetter).where(
                DeadLetter.source_topic == "agent-events",
                DeadLetter.partition == 0,
                DeadLetter.offset == 41,
            )
        ).one()
    assert (row.source_topic, row.error, row.payload, row.key) == (
        "agent-events",
        "bad json",
        payload,
        b"k",
    )
    assert row.recorded_at is not None


# -- run progress -------------------------------------------------------------------------


def mark(
    run_id: str,
    seq: int,
    event_time: int,
    status: str = "active",
    event_count: int | None = None,
    agent_id: str = "agent-a",
    gateway_id: str = "gw-1",
) -> RunWatermark:
    """A worker's watermark for ``run_id`` at ``seq`` (event count = seq unless given)."""
    return RunWatermark(
        run_id=run_id,
        agent_id=agent_id,
        gateway_id=gateway_id,
        seq=seq,
        event_time=event_time,
        status=status,
        event_count=seq if event_count is None else event_count,
    )


def test_run_progress_only_moves_forward(audit_store: AuditStore) -> None:
    s = audit_store
    assert s.run_progress("r") is None
    s.record_progress([mark("r", 1, 1_000)])
    s.record_progress([mark("r", 3, 3_000, event_count=2)])
    s.record_progress([mark("r", 3, 3_000, event_count=2)])  # redelivered
    assert s.run_progress("r") == RunProgress("r", "agent-a", "gw-1", 3, 2, 1_000, 3_000, "active")

    # replayed older watermarks move nothing back; first_event_time stays the first one's
    s.record_progress([mark("r", 0, 500, "weird", agent_id="", gateway_id="")])
    s.record_progress([mark("r", 4, 4_000, "ended")])
    s.record_progress([mark("r", 2, 2_000)])
    assert s.run_progress("r") == RunProgress("r", "agent-a", "gw-1", 4, 4, 1_000, 4_000, "ended")

    # a terminal status can still be set at the same seq (e.g. abort of the last event)
    s.record_progress([mark("r", 4, 4_000, "aborted")])
    progress = s.run_progress("r")
    assert progress is not None
    assert (progress.last_seq, progress.events, progress.status) == (4, 4, "aborted")


def test_record_progress_batch_with_repeated_runs(audit_store: AuditStore) -> None:
    marks = [
        mark("a", 1, 10),
        mark("b", 5, 50, agent_id="agent-b"),
        mark("a", 2, 20),
        mark("a", 3, 30, "ended", event_count=4),
        mark("b", 5, 50, agent_id="agent-b"),  # duplicate
    ]
    audit_store.record_progress(marks)
    audit_store.record_progress(marks)  # whole batch replayed
    progress = {run: audit_store.run_progress(run) for run in ("a", "b")}
    assert progress["a"] == RunProgress("a", "agent-a", "gw-1", 3, 4, 10, 30, "ended")
    assert progress["b"] == RunProgress("b", "agent-b", "gw-1", 5, 5, 50, 50, "active")
    audit_store.record_progress([])


def _expected_progress(marks: list[RunWatermark]) -> tuple[int, int, int, int, str]:
    """Reference model of the merge rule: (last_seq, events, first, last, status)."""
    first = marks[0]
    state = [first.seq, first.event_count, first.event_time, first.event_time, first.status]
    for m in marks[1:]:
        if m.seq >= state[0]:
            state[4] = m.status
        if m.seq > state[0]:
            state[0], state[1], state[3] = m.seq, m.event_count, m.event_time
    return tuple(state)  # type: ignore[return-value]


@settings(ON_THE_STORE, max_examples=25)
@given(
    updates=st.lists(
        st.tuples(
            st.integers(0, 20),
            st.integers(0, 10**13),
            st.sampled_from(["active", "ended", "aborted"]),
            st.integers(0, 30),
        ),
        min_size=1,
        max_size=12,
    ),
    alone=st.integers(0, 12),
)
def test_run_progress_matches_reference(
    audit_store: AuditStore, updates: list[tuple[int, int, str, int]], alone: int
) -> None:
    """The first ``alone`` watermarks are recorded one at a time, the rest in one batch (its
    watermarks merged per run first, progress_rows.py): the same row as one by one."""
    run = f"prop-{next(_unique)}"
    marks = [mark(run, seq, t, status, count) for seq, t, status, count in updates]
    for m in marks[:alone]:
        audit_store.record_progress([m])
    audit_store.record_progress(marks[alone:])
    got = audit_store.run_progress(run)
    assert got is not None
    assert (got.last_seq, got.events, got.first_event_time, got.last_event_time, got.status) == (
        _expected_progress(marks)
    )
    assert got.last_seq == max(u[0] for u in updates)
    assert got.first_event_time == updates[0][1]


# -- runs() -------------------------------------------------------------------------------


@pytest.fixture
def fleet(audit_store: AuditStore) -> AuditStore:
    """Three runs across two agents and two gateways, with mixed detectors and severities."""
    d = make_decision
    audit_store.record_decisions(
        [
            d(run_id="r1", agent_id="a1", gateway_id="g1", seq=1, event_time=1_000),
            d(
                run_id="r1",
                agent_id="a1",
                gateway_id="g1",
                seq=2,
                event_time=2_000,
                detector="ping_pong",
                action=Action.BLOCK,
                severity="critical",
            ),
            d(run_id="r2", agent_id="a1", gateway_id="g2", seq=1, event_time=3_000),
            d(
                run_id="r2",
                agent_id="a1",
                gateway_id="g2",
                seq=9,
                event_time=9_000,
                detector="no_progress",
                action=Action.ABORT,
                severity="critical",
            ),
            d(run_id="r3", agent_id="a2", gateway_id="g1", seq=4, event_time=5_000),
        ]
    )
    audit_store.record_progress([mark("r2", 9, 9_000, "aborted", 9, "a1", "g2")])
    return audit_store


def test_runs_summarises_each_run(fleet: AuditStore) -> None:
    runs = fleet.runs()
    assert [r.run_id for r in runs] == ["r2", "r3", "r1"]  # most recent decision first
    r2, r3, r1 = runs
    assert (r1.agent_id, r1.gateway_id, r1.decisions, r1.warn, r1.block, r1.abort) == (
        "a1",
        "g1",
        2,
        1,
        1,
        0,
    )
    assert r1.worst_action is Action.BLOCK
    assert (r1.first_decision_time, r1.last_decision_time) == (1_000, 2_000)
    assert r1.detectors == ["ping_pong", "repeat"]
    assert (r1.status, r1.last_seq, r1.events) == (None, None, None)
    assert r2.worst_action is Action.ABORT
    assert r2.detectors == ["no_progress", "repeat"]
    assert (r2.status, r2.last_seq, r2.events) == ("aborted", 9, 9)
    assert (r3.worst_action, r3.decisions, r3.detectors) == (Action.WARN, 1, ["repeat"])


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"agent": "a1"}, ["r2", "r1"]),
        ({"agent": "a2"}, ["r3"]),
        ({"gateway": "g1"}, ["r3", "r1"]),
        ({"agent": "a1", "gateway": "g1"}, ["r1"]),
        ({"detector": "repeat"}, ["r3", "r2", "r1"]),
        ({"detector": "no_progress"}, ["r2"]),
        ({"severity": "critical"}, ["r2", "r1"]),
        ({"since_ms": 5_000}, ["r2", "r3"]),
        ({"until_ms": 5_000}, ["r2", "r1"]),  # r2's decision at 3000; until is exclusive
        ({"since_ms": 2_000, "until_ms": 3_001}, ["r2", "r1"]),
        ({"limit": 2}, ["r2", "r3"]),
        ({"limit": 0}, []),
        ({"limit": None}, ["r2", "r3", "r1"]),
        ({"agent": "nobody"}, []),
    ],
)
def test_runs_filters(fleet: AuditStore, filters: dict[str, Any], expected: list[str]) -> None:
    assert [r.run_id for r in fleet.runs(**filters)] == expected


def test_runs_filters_shape_counts(fleet: AuditStore) -> None:
    """Filters select decisions, so counts/detectors/times describe only what matched."""
    r2, r1 = fleet.runs(agent="a1", until_ms=5_000, detector="repeat")
    assert (r2.run_id, r2.decisions, r2.detectors, r2.worst_action) == (
        "r2",
        1,
        ["repeat"],
        Action.WARN,
    )
    assert (r2.first_decision_time, r2.last_decision_time) == (3_000, 3_000)
    assert (r1.run_id, r1.decisions, r1.warn, r1.block) == ("r1", 1, 1, 0)
    (r1,) = fleet.runs(severity="critical", gateway="g1")
    assert (r1.run_id, r1.decisions, r1.block, r1.detectors) == ("r1", 1, 1, ["ping_pong"])


def test_runs_rejects_negative_limit(fleet: AuditStore) -> None:
    with pytest.raises(ValueError):
        fleet.runs(limit=-1)


# -- hostile input ------------------------------------------------------------------------


def test_hostile_identifiers_are_stored_and_matched_literally(audit_store: AuditStore) -> None:
    hostile = make_decision(run_id=HOSTILE, agent_id=HOSTILE, detector="repeat' OR '1'='1")
    decoys = [make_decision(run_id="x"), make_decision(run_id="x%"), make_decision(run_id="x_")]
    assert audit_store.record_decisions([hostile, *decoys]) == 4
    audit_store.record_progress([mark(HOSTILE, 1, 1, agent_id=HOSTILE, gateway_id="gw")])

    assert audit_store.history(HOSTILE) == [hostile]
    assert audit_store.history("x%") == [decoys[1]]
    assert [r.run_id for r in audit_store.runs(agent=HOSTILE)] == [HOSTILE]
    assert [r.run_id for r in audit_store.runs(detector="repeat' OR '1'='1")] == [HOSTILE]
    assert audit_store.runs(agent="' OR '1'='1") == []
    progress = audit_store.run_progress(HOSTILE)
    assert progress is not None and progress.run_id == HOSTILE
    assert audit_store.decision_count() == 4
    assert set(inspect(audit_store.engine).get_table_names()) >= AUDIT_TABLES


@settings(ON_THE_STORE, max_examples=25)
@given(
    updates=st.lists(
        st.tuples(st.sampled_from("ab"), st.integers(0, 6), st.integers(1, 500)),
        min_size=1,
        max_size=10,
    ),
    alone=st.integers(0, 10),
)
def test_run_usage_of_a_merged_batch_is_that_of_one_by_one(
    audit_store: AuditStore, updates: list[tuple[str, int, int]], alone: int
) -> None:
    """Usage: the watermark at the highest seq wins, the later one at an equal seq."""
    prefix = f"usage-{next(_unique)}-"
    marks = [
        replace(mark(prefix + run, seq, 0), input_tokens=tokens, saved_tokens=seq)
        for run, seq, tokens in updates
    ]
    for m in marks[:alone]:
        audit_store.record_progress([m])
    audit_store.record_progress(marks[alone:])
    got = audit_store.run_usage({m.run_id for m in marks})
    for run_id in {m.run_id for m in marks}:
        wins: RunWatermark | None = None
        for m in marks:
            if m.run_id == run_id and (wins is None or m.seq >= wins.seq):
                wins = m
        assert wins is not None
        assert (got[run_id]["input_tokens"], got[run_id]["saved_tokens"]) == (
            wins.input_tokens,
            wins.saved_tokens,
        )
