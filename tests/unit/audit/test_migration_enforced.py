"""Migration 0003 (decisions.enforced) on a trail that already holds rows written at 0002:
they read as enforced, observe-only decisions written afterwards read as such, and the
downgrade keeps every row (SQLite, and PostgreSQL when LOOPGUARD_TEST_PG_URL is set)."""

from __future__ import annotations

from dataclasses import replace

from alembic import command
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from streams.audit.database import alembic_config
from streams.audit.store import AuditStore
from streams.core.events import Action, Decision

OLD_COLUMNS = (
    "decision_id, run_id, agent_id, gateway_id, seq, event_time, action, detector, severity, "
    "count, tool_name, reason, args_hash, result_hash, paired_tool_name, error_code, "
    "config_version, extra"
)


def make_decision(run_id: str = "run-1", seq: int = 1, enforced: bool = True) -> Decision:
    return Decision(
        run_id, "agent-a", "gw-1", seq, 1_700_000_000_000, Action.BLOCK, "generic_repeat",
        "critical", 20, "exec", "exec repeated 20 times", enforced=enforced,
    )  # fmt: skip


def current_revision(store: AuditStore) -> str | None:
    with store.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def insert_at_0002(store: AuditStore, decision_id: str, seq: int) -> None:
    """A row as a worker at revision 0002 wrote it: no enforced column to fill."""
    with store.engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO decisions ({OLD_COLUMNS}) VALUES (:id, 'run-old', 'agent-a', "
                "'gw-1', :seq, 1700000000000, 'block', 'generic_repeat', 'critical', 20, "
                "'exec', 'looping', '', '', '', '', 'v1', '{}')"
            ),
            {"id": decision_id, "seq": seq},
        )


def test_rows_from_0002_read_as_enforced_after_0003(db_url: str) -> None:
    with AuditStore(db_url) as store:
        command.upgrade(alembic_config(db_url), "0002")
        assert "enforced" not in {c["name"] for c in inspect(store.engine).get_columns("decisions")}
        insert_at_0002(store, "run-old:4:generic_repeat:block", 4)
        insert_at_0002(store, "run-old:5:generic_repeat:block", 5)

        command.upgrade(alembic_config(db_url), "0003")
        assert current_revision(store) == "0003"
        old = store.history("run-old")
        assert [(d.seq, d.enforced) for d in old] == [(4, True), (5, True)]

        observed = make_decision(run_id="run-new", enforced=False)
        enforced = make_decision(run_id="run-new", seq=2)
        assert store.record_decisions([observed, enforced]) == 2
        assert store.history("run-new") == [observed, enforced]
        assert [d.enforced for d in store.history("run-new")] == [False, True]

        command.downgrade(alembic_config(db_url), "0002")
        assert "enforced" not in {c["name"] for c in inspect(store.engine).get_columns("decisions")}
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM decisions")).scalar_one() == 4
        command.upgrade(alembic_config(db_url), "head")  # and up again: all read as enforced
        assert all(d.enforced for d in store.history("run-new"))


def test_an_observe_only_decision_round_trips(audit_store: AuditStore) -> None:
    decision = replace(make_decision(), enforced=False)
    assert audit_store.record_decision(decision)
    assert not audit_store.record_decision(decision)  # idempotent, as every write
    assert audit_store.history(decision.run_id) == [decision]
