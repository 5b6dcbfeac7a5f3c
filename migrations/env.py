"""Alembic environment for the audit trail (the generic template, plus URL fallbacks).

The URL comes from ``sqlalchemy.url`` (set by ``streams.audit.database.migrate``), else the
``LOOPGUARD_DB_URL`` environment variable, else the embedded default the app itself uses.
"""

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import pool

from streams.audit.engines import DEFAULT_URL, create_audit_engine
from streams.audit.models import Base

# this is the Alembic Config object, which provides
# access to the values within the .ini file in use.
config = context.config

# Interpret the config file for Python logging; skipped when configured programmatically
# so migrating from inside the app does not reset the app's logging.
if config.config_file_name is not None:
    fileConfig(config.config_file_name)

target_metadata = Base.metadata


def database_url() -> str:
    return (
        config.get_main_option("sqlalchemy.url")
        or os.environ.get("LOOPGUARD_DB_URL")
        or DEFAULT_URL
    )


def run_migrations_offline() -> None:
    """Run migrations in 'offline' mode: emit SQL to stdout without a database connection."""
    url = database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.startswith("sqlite"),
    )

    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run migrations in 'online' mode against a live connection."""
    connectable = create_audit_engine(database_url(), poolclass=pool.NullPool)

    with connectable.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            # sqlite cannot ALTER most things; batch mode recreates tables instead
            render_as_batch=connection.dialect.name == "sqlite",
        )

        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
