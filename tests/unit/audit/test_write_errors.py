"""Which audit write failures are the record's data (quarantined after a few tries) and which
are the database's (retried until it answers)."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from sqlalchemy import exc as sa_exc

from streams.audit.write_errors import error_text, is_data_error, safe_text

READ_ONLY = "attempt to write a readonly database"
NO_TABLE = 'relation "decisions" does not exist'


def wrapped(cls: type[sa_exc.DBAPIError], orig: Exception) -> sa_exc.DBAPIError:
    return cls("INSERT INTO decisions ...", {"reason": "x"}, orig)


@pytest.mark.parametrize(
    "error",
    [
        wrapped(sa_exc.DataError, psycopg.DataError("PostgreSQL text fields cannot contain NUL")),
        wrapped(sa_exc.IntegrityError, sqlite3.IntegrityError("NOT NULL constraint failed")),
        wrapped(sa_exc.DBAPIError, psycopg.errors.CharacterNotInRepertoire("invalid byte seq")),
        wrapped(sa_exc.InterfaceError, sqlite3.InterfaceError("Error binding parameter 3")),
        sa_exc.StatementError("bind failed", "INSERT", {}, ValueError("bad value")),
        UnicodeEncodeError("utf-8", "\udc80", 0, 1, "surrogates not allowed"),
        OverflowError("Python int too large to convert to SQLite INTEGER"),
        psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
        ValueError("A string literal cannot contain NUL (0x00) characters."),
    ],
)
def test_data_errors(error: BaseException) -> None:
    assert is_data_error(error)


@pytest.mark.parametrize(
    "error",
    [
        wrapped(sa_exc.OperationalError, psycopg.OperationalError("connection refused")),
        wrapped(sa_exc.OperationalError, sqlite3.OperationalError(READ_ONLY)),
        wrapped(sa_exc.OperationalError, sqlite3.OperationalError("disk I/O error")),
        wrapped(sa_exc.OperationalError, sqlite3.OperationalError("database is locked")),
        wrapped(sa_exc.ProgrammingError, psycopg.ProgrammingError(NO_TABLE)),
        wrapped(sa_exc.InterfaceError, psycopg.InterfaceError("the connection is closed")),
        wrapped(sa_exc.DatabaseError, sqlite3.DatabaseError("database disk image is malformed")),
        sa_exc.TimeoutError("QueuePool limit reached"),
        OSError(28, "No space left on device"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        TimeoutError(),
    ],
)
def test_operational_errors(error: BaseException) -> None:
    assert not is_data_error(error)


def test_error_text_is_storable_and_leaves_out_the_statement() -> None:
    error = wrapped(sa_exc.DataError, psycopg.DataError("cannot contain NUL \x00 \udc80"))
    text = error_text(error)
    assert text.startswith("DataError: ") and "[SQL:" not in text
    assert "\x00" not in text and "\\x00" in text
    text.encode("utf-8")  # no unpaired surrogate left
    assert safe_text("a\x00b") == "a\\x00b"
    assert len(error_text(ValueError("x" * 5000), limit=100)) == 100
