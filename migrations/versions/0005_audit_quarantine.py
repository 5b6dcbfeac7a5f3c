"""Quarantine: audit records the database refused for their data, with its error.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04

Reserved in the chain so that work on several features can land in any order; filled in by the
change that needs it (until then it changes nothing).
"""

from collections.abc import Sequence

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""


def downgrade() -> None:
    """Downgrade schema."""
