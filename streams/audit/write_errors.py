"""Why an audit write failed: the record's data, or the database (connection, disk, locks).

The two need opposite answers. A record the database refuses for what it holds (a NUL byte
in PostgreSQL text, a number out of range, a string the driver cannot encode) is refused
again however often it is sent: retrying it forever stops the audit trail behind it, so it
is tried a bounded number of times and quarantined. Anything else (the server away, a
read-only or full file, a lock, a missing table) may pass: it is retried until it does.
"""

from __future__ import annotations

from sqlalchemy import exc as sa_exc

# Raised by a driver or SQLAlchemy's bind processing for a value it cannot send.
_VALUE_ERRORS = (ValueError, TypeError, OverflowError)  # UnicodeError is a ValueError
# DB-API classes (PEP 249) that mean "this data", whatever the driver's module.
_DBAPI_DATA_CLASSES = ("DataError", "IntegrityError")
# Messages of data refusals some drivers raise under another class.
_DATA_HINTS = (
    "invalid byte sequence",
    "cannot contain nul",
    "error binding parameter",
    "out of range",
    "value too long",
    "string or blob too big",
    "codec can't encode",
)


def is_data_error(exc: BaseException) -> bool:
    """True when the database or its driver refused the record's data (retrying cannot
    help); False for connection, operational and schema errors (retrying may)."""
    if isinstance(exc, sa_exc.DataError | sa_exc.IntegrityError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        return _driver_data_error(exc.orig)
    if isinstance(exc, sa_exc.StatementError):
        # Raised before the database saw the statement: binding a parameter failed.
        orig = exc.orig
        return isinstance(orig, _VALUE_ERRORS) or (
            isinstance(orig, BaseException) and _driver_data_error(orig)
        )
    if isinstance(exc, sa_exc.SQLAlchemyError):
        return False
    return _driver_data_error(exc) or isinstance(exc, _VALUE_ERRORS)


def _driver_data_error(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    for cls in type(exc).__mro__:
        if cls.__name__ in _DBAPI_DATA_CLASSES and cls.__module__.split(".")[0] in (
            "psycopg",
            "psycopg2",
            "sqlite3",
        ):
            return True
    message = str(exc).lower()
    return any(hint in message for hint in _DATA_HINTS)


def error_text(exc: BaseException, limit: int = 2000) -> str:
    """The error as one storable, loggable string: class and message, NUL bytes escaped,
    at most ``limit`` characters."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, sa_exc.StatementError):
        # SQLAlchemy appends the SQL and its parameters (the refused data itself).
        message = message.split("\n[SQL:", 1)[0]
    text = f"{type(exc).__name__}: {message}"
    return safe_text(text)[:limit]


def safe_text(text: str) -> str:
    """``text`` that any database stores: NUL and unpaired surrogates escaped."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
