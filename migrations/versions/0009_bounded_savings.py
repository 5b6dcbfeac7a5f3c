"""Saved-tokens estimates by the bounded method (issue 41).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06

Until now a stopped run's estimate projected its pace over an hour: a demo run that spent
291,600 tokens in under a second showed 1,005,958,800 saved. The method now never exceeds
what the run had spent when it was stopped (docs/reference.md, "What loops cost"); this caps
the estimates stored by the old one at their run's tokens, so the status page's total and
``loopguard runs`` keep to the same bound. Not every old estimate becomes what the new
method would have said (the stop time is not stored), only no larger than it could be. The
downgrade keeps the capped figures: the old ones are not recoverable, nor worth it.
"""

from collections.abc import Sequence

from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Cap each stored estimate at its run's tokens."""
    op.execute(
        "UPDATE run_usage SET saved_tokens = input_tokens + output_tokens "
        "WHERE saved_tokens > input_tokens + output_tokens"
    )


def downgrade() -> None:
    """Nothing to undo: the capped estimates stay."""
