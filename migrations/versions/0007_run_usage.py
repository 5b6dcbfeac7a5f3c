"""Token usage per run, and what looping cost (issue 28).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04

One row per run whose gateway reports usage, upserted from the workers' watermarks
(monotonic by seq). Hand-written like 0003: the types are spelled out here, not imported
from the models.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    zero = sa.text("0")
    op.create_table(
        "run_usage",
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), server_default=zero, nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=zero, nullable=False),
        sa.Column("cost_usd", sa.Float(), server_default=zero, nullable=False),
        sa.Column("tool_calls", sa.BigInteger(), server_default=zero, nullable=False),
        sa.Column("loop_tokens", sa.BigInteger(), server_default=zero, nullable=False),
        sa.Column("loop_cost_usd", sa.Float(), server_default=zero, nullable=False),
        sa.Column("loop_calls", sa.BigInteger(), server_default=zero, nullable=False),
        sa.Column("saved_tokens", sa.BigInteger(), server_default=zero, nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_run_usage"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("run_usage")
