"""Decisions: ``enforced``, false for an agent in ``mode: "observe"`` (shadow mode, issue 17).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03

The server default is true, so every row written before this revision (and by a worker that
does not know the field yet) reads as enforced, as it was. Hand-written like 0001 and 0002.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column(
        "decisions",
        sa.Column("enforced", sa.Boolean(), server_default=sa.true(), nullable=False),
    )


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("enforced")
