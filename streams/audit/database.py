"""The audit database's migrations: Alembic's config for the packaged ``migrations/``, the
upgrade to head, and the revisions a database is at (the engines: :mod:`streams.audit.engines`).

The schema is brought up to date only by Alembic (:func:`migrate`), so production and tests
run exactly the same DDL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import URL, make_url

import migrations
from streams.audit.engines import DEFAULT_URL, create_audit_engine

# Works from any cwd, for editable installs and for wheels (migrations/ ships next to streams/).
MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


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
