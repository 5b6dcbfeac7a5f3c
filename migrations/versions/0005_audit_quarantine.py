"""Quarantine: audit records the database refused for their data, with its error.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04

A decision, run progress or dead letter the database refuses for what it holds (a NUL byte
in PostgreSQL text, a number out of range) is tried a bounded number of times and then kept
here, so the audit trail goes on past it (issue 26). Not ``dead_letters``: those are input
the guard could not process, keyed by their Kafka position; a refused audit record was
guarded and published, and is keyed by what it is (``kind``, ``record_key``), so a
redelivery is one row. ``payload`` is the record as JSON bytes (a NUL byte kept escaped),
``error`` the database's answer. Hand-written like 0001-0004.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "audit_quarantine",
        sa.Column("id", _Id, autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("record_key", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), server_default="", nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name="pk_audit_quarantine"),
        sa.UniqueConstraint("kind", "record_key", name="uq_audit_quarantine_kind_record_key"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("audit_quarantine")
