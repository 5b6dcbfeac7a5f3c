"""Loops between agents: cycles of agent-to-agent sends.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04

Reserved in the chain so that work on several features can land in any order; filled in by the
change that needs it (until then it changes nothing).
"""

from collections.abc import Sequence

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""


def downgrade() -> None:
    """Downgrade schema."""
