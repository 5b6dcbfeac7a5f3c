"""The audit database: engines with the audit trail's conventions, and its migrations.

Shared by the store, the worker's startup checks and ``migrations/env.py``; the schema is
brought up to date only by Alembic (:func:`migrate`), so production and tests run exactly the
same DDL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

import migrations

DEFAULT_URL = "sqlite:///loopguard-data/audit.db"
# Works from any cwd, for editable installs and for wheels (migrations/ ships next to streams/).
MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent

# Constant statements only: PRAGMA cannot take bound parameters.
_SQLITE_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA busy_timeout=5000")
_SUPPORTED_DIALECTS = ("sqlite", "postgresql")


def create_audit_engine(url: str | URL = DEFAULT_URL, **kwargs: Any) -> Engine:
    """Engine with the audit-trail conventions; shared by the store and ``migrations/env.py``.

    For sqlite files the parent directory is created (so the default works on a fresh
    checkout) and WAL plus a busy timeout are set, letting the CLI read while the
    processor writes.
    """
    url = make_url(url)
    if url.get_backend_name() not in _SUPPORTED_DIALECTS:
        raise ValueError(f"unsupported audit database {url.get_backend_name()!r}")
    is_sqlite = url.get_backend_name() == "sqlite"
    database = url.database or ""
    if is_sqlite and database not in ("", ":memory:") and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **kwargs)
    if is_sqlite:
        event.listen(engine, "connect", _sqlite_on_connect)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in _SQLITE_PRAGMAS:
            cursor.execute(pragma)
    finally:
        cursor.close()


def alembic_config(url: str | URL = DEFAULT_URL) -> Config:
    """Alembic config pointing at the packaged migrations, independent of cwd and alembic.ini."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    rendered = make_url(url).render_as_string(hide_password=False)
    cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))  # configparser escape
    return cfg


def migrate(url: str | URL = DEFAULT_URL) -> None:
    """Bring the schema to the latest revision (``alembic upgrade head``)."""
    command.upgrade(alembic_config(url), "head")


def schema_revisions(url: str | URL, **engine_kwargs: Any) -> tuple[str | None, str | None]:
    """(the database's current revision, the packaged head): equal when migrated. Raises
    SQLAlchemy's errors when the database does not answer; never creates a file or folder
    beyond what :func:`create_audit_engine` does."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    engine = create_audit_engine(url, **engine_kwargs)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
    return current, head
