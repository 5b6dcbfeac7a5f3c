"""Engines with the audit trail's conventions: the default URL, SQLite's pragmas, PostgreSQL's
connect timeout, a one-line refusal of a URL that names no supported database.

Shared by the store, the worker's startup checks and ``migrations/env.py``; the migrations
themselves are :mod:`streams.audit.database`'s (apart, so Alembic's environment imports this
module and nothing that imports the migrations back).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

log = logging.getLogger("loopguard.audit")

DEFAULT_URL = "sqlite:///loopguard-data/audit.db"

# Constant statements only: PRAGMA cannot take bound parameters. A rollback journal, not WAL,
# and no memory-mapped I/O: WAL's shared-memory index (the -shm file) is mmap'd, and a write
# to it once the file turned immutable or its disk failed is a SIGBUS that kills the whole
# worker, guard included (issue 26); with plain file I/O the same fault is an error the audit
# writer retries. Readers and the writer then take turns, each waiting up to busy_timeout.
_SQLITE_PRAGMAS = ("PRAGMA busy_timeout=5000", "PRAGMA mmap_size=0")
# Leaving WAL (a file an older loopguard made) needs the file to itself: while another
# connection has it open this fails, and the next connection tries again.
_SQLITE_JOURNAL = "PRAGMA journal_mode=DELETE"
_SUPPORTED_DIALECTS = ("sqlite", "postgresql")
# A PostgreSQL server that does not answer (a dropped route, a firewall) fails a connect in
# this many seconds instead of the OS's minutes, so writes retry and shutdown is not held.
PG_CONNECT_TIMEOUT = 10


def create_audit_engine(url: str | URL = DEFAULT_URL, **kwargs: Any) -> Engine:
    """Engine with the audit-trail conventions; shared by the store and ``migrations/env.py``.

    For sqlite files the parent directory is created (so the default works on a fresh
    checkout), a rollback journal without mmap and a busy timeout are set (see
    ``_SQLITE_PRAGMAS``), letting the CLI read while the processor writes. PostgreSQL gets
    a connect timeout unless ``connect_args`` names one.
    """
    url = make_url(url)
    if url.get_backend_name() not in _SUPPORTED_DIALECTS:
        raise ValueError(unsupported(url))
    is_sqlite = url.get_backend_name() == "sqlite"
    database = url.database or ""
    if is_sqlite and database not in ("", ":memory:") and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    if url.get_backend_name() == "postgresql":
        connect_args = dict(kwargs.pop("connect_args", None) or {})
        connect_args.setdefault("connect_timeout", PG_CONNECT_TIMEOUT)
        kwargs["connect_args"] = connect_args
    engine = create_engine(url, **kwargs)
    if is_sqlite:
        event.listen(engine, "connect", _sqlite_on_connect)
    return engine


def unsupported(url: URL) -> str:
    """Why ``url`` names no audit database, with the spelling meant when it is a common one:
    ``postgres://`` (libpq's and Heroku's alias) is ``postgresql://`` to SQLAlchemy."""
    backend = url.get_backend_name()
    if backend in ("postgres", "pgsql", "psql"):
        return (
            f"unsupported audit database {backend!r}: write postgresql://... ({url.drivername}:// "
            "is libpq's alias; SQLAlchemy knows PostgreSQL as postgresql://)"
        )
    return f"unsupported audit database {backend!r} (sqlite:/// or postgresql://)"


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in _SQLITE_PRAGMAS:
            cursor.execute(pragma)
        try:
            cursor.execute(_SQLITE_JOURNAL)
        except sqlite3.OperationalError as exc:
            log.debug("audit database stays in its journal mode for now: %s", exc)
    finally:
        cursor.close()
