"""Config changes that weaken guarding (issue 40).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

A change is now judged by its effect: the canonical loops (streams.core.config_canary) that
were stopped under the config before it and are no longer stopped after it, one line in
``config_changes.weakened`` (empty: nothing weakened). ``config history`` shows it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.add_column(
        "config_changes",
        sa.Column("weakened", sa.Text(), server_default="", nullable=False),
    )


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("config_changes") as batch:
        batch.drop_column("weakened")
