"""Secrets hidden from everything loopguard shows: a database or broker URL as it appears in
the log, the status page and the CLI's messages.

A URL is redacted as the most generous of its readers would read it: SQLAlchemy's
``make_url`` takes a password up to the first ``@`` and lets it hold ``/``, ``?`` and ``#``
unencoded, ``urlsplit`` takes the authority up to its last ``@``; the userinfo is therefore
cut at the last ``@`` a username could reach, so no reading leaves part of a password shown.
In the query string, a secret key's value, a ``dsn`` (a whole connection string) and any
value that itself holds a secret ``key=value`` (``options=-c password=…``) are hidden.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

#: A query-string key naming a secret: these, and any key that contains one (``api_key``,
#: ``access_token``, ``sslpassword``), case aside.
SECRET_QUERY_KEYS = ("password", "passwd", "pwd", "secret", "token", "key")
#: Query keys whose whole value is a connection string (libpq's and ODBC's ``dsn``).
CONNECTION_STRING_KEYS = ("dsn", "odbc_connect")
REDACTED = "***"

#: A secret ``key=value`` inside a value (``-c password=x``, ``host=h pwd=x``), key aside.
_NESTED_SECRET = re.compile(rf"[A-Za-z_]*(?:{'|'.join(SECRET_QUERY_KEYS)})[A-Za-z_]*\s*=", re.I)
#: Where one URL of a list starts: its scheme (``kafka://a:1;kafka://b:2``).
_NEXT_URL = re.compile(r"[;,](?=\s*[A-Za-z][A-Za-z0-9+.-]*://)")


def is_secret_key(name: str) -> bool:
    """Whether a query-string key names a secret (see :data:`SECRET_QUERY_KEYS`)."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_QUERY_KEYS)


def hides_value(name: str, value: str) -> bool:
    """Whether a query argument's value is a secret or holds one (both given decoded)."""
    if is_secret_key(name) or name.lower() in CONNECTION_STRING_KEYS:
        return True
    return _NESTED_SECRET.search(value) is not None


def _redact_query(query: str) -> str:
    """Each ``key=value`` pair of a raw query string, a secret value hidden; the rest stays
    exactly as written (no re-encoding)."""
    parts = []
    for pair in query.split("&"):
        name, sep, value = pair.partition("=")
        if sep and value and hides_value(unquote_plus(name), unquote_plus(value)):
            value = REDACTED
        parts.append(f"{name}{sep}{value}")
    return "&".join(parts)


def _userinfo_end(rest: str) -> int:
    """Where the userinfo of ``rest`` (a URL after ``scheme://``) ends: the last ``@`` whose
    username (what precedes the first ``:``) holds no ``/``, as both readers require; -1 if
    none."""
    at = rest.rfind("@")
    while at != -1:
        user = rest[:at].partition(":")[0]
        if "/" not in user:
            return at
        at = rest.rfind("@", 0, at)
    return -1


def redact_url(url: str) -> str:
    """The URL with every secret hidden, for logs and pages: its password (``user:***@host``)
    and the secret values after its first ``?`` or ``#`` (SQLAlchemy reads a query past a
    ``#``); a URL without one is returned as given."""
    scheme, slashes, rest = url.partition("://")
    head = f"{scheme}://" if slashes else ""
    if not slashes:
        rest = url
    at = _userinfo_end(rest)
    if at != -1:
        user, colon, password = rest[:at].partition(":")
        head += f"{user}:{REDACTED}@" if colon and password else rest[: at + 1]
        rest = rest[at + 1 :]
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i != -1), default=-1)
    if cut != -1:
        rest = rest[: cut + 1] + _redact_query(rest[cut + 1 :])
    shown = head + rest
    return url if shown == url else shown


def redact_urls(text: str) -> str:
    """:func:`redact_url` on each URL of a list (``kafka://a:1;kafka://b:2``, commas too); a
    separator counts only before another scheme, so a password holding ``,`` or ``;`` stays
    inside its URL."""
    pieces = _NEXT_URL.split(text)
    separators = _NEXT_URL.findall(text)
    shown = [redact_url(pieces[0])]
    for separator, piece in zip(separators, pieces[1:], strict=True):
        shown.append(separator + redact_url(piece))
    return "".join(shown)
