"""Token usage per run, and what looping cost.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04

Reserved in the chain so that work on several features can land in any order; filled in by the
change that needs it (until then it changes nothing).
"""

from collections.abc import Sequence

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""


def downgrade() -> None:
    """Downgrade schema."""
