"""Database fixtures: every audit test runs against SQLite and PostgreSQL.

Load from ``tests/conftest.py`` with ``pytest_plugins = ["db_fixtures"]`` (or
``from db_fixtures import audit_store, db_url``). PostgreSQL comes from the server in
``LOOPGUARD_TEST_PG_URL``; each test gets its own freshly created database, dropped
afterwards, so migrations always start from empty. Without that variable the postgres
cases are skipped, unless ``LOOPGUARD_REQUIRE_PG=1`` (CI), where silently testing only
SQLite would hide dialect bugs, so they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, insert, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from streams.audit.models import ProcessedEvent
from streams.audit.store import AuditStore

PG_URL_ENV = "LOOPGUARD_TEST_PG_URL"
REQUIRE_PG_ENV = "LOOPGUARD_REQUIRE_PG"
# The SQLite case of a test run on both backends is marked ``sqlite``: CI's Apache Kafka pass
# deselects it (``-m "not sqlite"``) and runs the production pair, Kafka and PostgreSQL; the
# README pass runs both backends on tansu. Tests that pin SQLite (a file's faults) keep theirs.
BACKENDS = [
    pytest.param("sqlite", marks=pytest.mark.sqlite),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


def _sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'audit.db'}"


def fresh_pg_database() -> Iterator[str]:
    server = os.environ.get(PG_URL_ENV)
    if not server:
        why = (
            f"{PG_URL_ENV} is not set (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/postgres)"
        )
        if os.environ.get(REQUIRE_PG_ENV) == "1":
            pytest.fail(f"PostgreSQL required ({REQUIRE_PG_ENV}=1) but {why}", pytrace=False)
        pytest.skip(f"PostgreSQL backend skipped: {why}")
    admin = create_engine(server, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    # CREATE/DROP DATABASE cannot take bound parameters; the name is generated here and
    # quoted by the dialect, never derived from input.
    name = f"loopguard_test_{uuid.uuid4().hex[:16]}"
    quoted = admin.dialect.identifier_preparer.quote(name)
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {quoted}"))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of an empty database (no schema) on each backend."""
    if request.param == "sqlite":
        yield _sqlite_url(tmp_path)
    else:
        yield from fresh_pg_database()


@pytest.fixture
def audit_store(db_url: str) -> Iterator[AuditStore]:
    """A migrated, empty audit store on each backend."""
    store = AuditStore(db_url)
    store.migrate()
    try:
        yield store
    finally:
        store.close()


def record_progress(
    store: AuditStore, run_id: str, agent: str, last_seq: int, t: int, status: str, events: int
) -> None:
    """A run's progress row, written straight to its table (the write API is the worker's)."""
    row = {
        "run_id": run_id,
        "agent_id": agent,
        "gateway_id": "gw-1",
        "last_seq": last_seq,
        "events": events,
        "first_event_time": t,
        "last_event_time": t,
        "status": status,
    }
    with store.engine.begin() as conn:
        conn.execute(insert(ProcessedEvent), [row])
