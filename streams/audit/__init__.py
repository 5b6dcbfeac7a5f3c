"""The SQL audit trail: SQLAlchemy models, the store that writes and queries them, and Alembic
migrations.

May import streams.core and streams.wire (the watermarks it records).
"""
