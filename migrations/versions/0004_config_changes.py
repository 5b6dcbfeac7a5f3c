"""Config changes: every change with its value, versions before and after, and its sender.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04

One row per change of the guard's config (issue 26): a config-topic record (its topic,
partition and offset; ``change_id`` keeps a replayed record to one row), a ``loopguard config``
change (the same, with the sender's headers) or the worker's config file at start. Hand-written
like 0001-0003.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "config_changes",
        sa.Column("id", _Id, autoincrement=True, nullable=False),
        sa.Column("change_id", sa.String(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("agent_key", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), server_default="", nullable=False),
        sa.Column("version_before", sa.String(), server_default="", nullable=False),
        sa.Column("version_after", sa.String(), server_default="", nullable=False),
        sa.Column("disables", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("principal", sa.String(), server_default="", nullable=False),
        sa.Column("client_id", sa.String(), server_default="", nullable=False),
        sa.Column("sender_user", sa.String(), server_default="", nullable=False),
        sa.Column("sender_host", sa.String(), server_default="", nullable=False),
        sa.Column("topic", sa.String(), server_default="", nullable=False),
        sa.Column("partition", sa.Integer(), nullable=True),
        sa.Column("offset", sa.BigInteger(), nullable=True),
        sa.Column("changed_at", sa.BigInteger(), nullable=False),
        sa.Column("recorded_by", sa.String(), server_default="", nullable=False),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name="pk_config_changes"),
        sa.UniqueConstraint("change_id", name="uq_config_changes_change_id"),
    )
    op.create_index("ix_config_changes_agent_key", "config_changes", ["agent_key"])
    op.create_index("ix_config_changes_changed_at", "config_changes", ["changed_at"])


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("ix_config_changes_changed_at", table_name="config_changes")
    op.drop_index("ix_config_changes_agent_key", table_name="config_changes")
    op.drop_table("config_changes")
