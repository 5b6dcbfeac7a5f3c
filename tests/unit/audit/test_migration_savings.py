"""Migration 0009 (issue 41): saved-tokens estimates stored by the old, unbounded method are
capped at their run's tokens; estimates within the bound and the other usage columns stay
(SQLite, and PostgreSQL when LOOPGUARD_TEST_PG_URL is set)."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from streams.audit.database import alembic_config
from streams.audit.store import AuditStore

INSERT = text(
    "INSERT INTO run_usage (run_id, last_seq, input_tokens, output_tokens, tool_calls, "
    "loop_tokens, saved_tokens) VALUES (:run, 48, :tokens_in, :tokens_out, 23, 157950, :saved)"
)


def test_old_estimates_are_capped_at_their_runs_tokens(db_url: str) -> None:
    config = alembic_config(db_url)
    command.upgrade(config, "0008")
    with AuditStore(db_url) as store:
        with store.engine.begin() as conn:
            # the demo's polling run as the old method left it, and a run within the bound
            conn.execute(INSERT, dict(run="demo", tokens_in=284_700, tokens_out=6_900,
                                      saved=1_005_958_800))  # fmt: skip
            conn.execute(INSERT, dict(run="modest", tokens_in=9_000, tokens_out=1_000,
                                      saved=4_000))  # fmt: skip
        command.upgrade(config, "0009")
        usage = store.run_usage(["demo", "modest"])
        assert usage["demo"]["saved_tokens"] == 284_700 + 6_900
        assert usage["modest"]["saved_tokens"] == 4_000
        assert usage["demo"]["loop_tokens"] == 157_950 and usage["demo"]["tool_calls"] == 23
        command.downgrade(config, "0008")  # keeps the capped figures
        assert store.run_usage(["demo"])["demo"]["saved_tokens"] == 291_600
