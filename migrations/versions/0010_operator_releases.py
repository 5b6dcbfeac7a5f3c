"""Operator releases: who released (or aborted) a run, why, and the stop it lifted.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

One row per run an operator's release or abort reached (issue 43: ``loopguard release``, the
run page's buttons, a held call's webhook), written by the audit agent when the worker has
applied it: the window of warnings only it opened (calls or until), the reason and sender,
and the rule, action and seq of the stop it lifted, so ``loopguard quality`` can count a
release as a labelled false stop. Hand-written like 0004.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "operator_releases",
        sa.Column("id", _Id, autoincrement=True, nullable=False),
        sa.Column("release_id", sa.String(), nullable=False),
        sa.Column("command", sa.String(16), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("agent_id", sa.String(), server_default="", nullable=False),
        sa.Column("calls", sa.Integer(), nullable=True),
        sa.Column("until_ms", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("released_by", sa.String(), server_default="", nullable=False),
        sa.Column("source", sa.String(16), server_default="", nullable=False),
        sa.Column("requested_at", sa.BigInteger(), nullable=False),
        sa.Column("applied_seq", sa.BigInteger(), nullable=False),
        sa.Column("released_detector", sa.String(), server_default="", nullable=False),
        sa.Column("released_action", sa.String(16), server_default="", nullable=False),
        sa.Column("released_seq", sa.BigInteger(), nullable=True),
        sa.Column("decision_id", sa.String(), server_default="", nullable=False),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name="pk_operator_releases"),
        sa.UniqueConstraint("release_id", "run_id", name="uq_operator_releases_release_id_run_id"),
    )
    op.create_index("ix_operator_releases_run_id", "operator_releases", ["run_id"])
    op.create_index("ix_operator_releases_agent_id", "operator_releases", ["agent_id"])
    op.create_index("ix_operator_releases_requested_at", "operator_releases", ["requested_at"])


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("operator_releases")
