"""Every credential form a database or broker URL can carry stays hidden (issue 40, item 9):
a password with unencoded ``/``, ``?``, ``#`` or ``@`` (SQLAlchemy accepts it), ``options=-c
password=…``, ``dsn=…`` and secret query keys; SQLAlchemy's own parse is the oracle."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from streams.observability.redaction import redact_url, redact_urls


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # The password as SQLAlchemy reads it: up to the first '@', '/', '?' and '#' included.
        ("postgresql+psycopg://lg:pa/ss@db/x", "postgresql+psycopg://lg:***@db/x"),
        ("postgresql+psycopg://lg:pa?ss@db/x", "postgresql+psycopg://lg:***@db/x"),
        ("postgresql+psycopg://lg:pa#ss@db/x", "postgresql+psycopg://lg:***@db/x"),
        ("postgresql://lg:a/b?c#d@db:5432/x?sslmode=require", "postgresql://lg:***@db:5432/x?sslmode=require"),
        # Credentials inside another argument's value.
        ("postgresql://lg@db/x?options=-c%20password%3Dopt-secret", "postgresql://lg@db/x?options=***"),
        ("postgresql://lg@db/x?options=-c+password=opt-secret&sslmode=require",
         "postgresql://lg@db/x?options=***&sslmode=require"),
        ("postgresql://lg@db/x?options=-c%20search_path%3Daudit", "postgresql://lg@db/x?options=-c%20search_path%3Daudit"),
        ("postgresql:///x?dsn=host%3Ddb%20user%3Dlg%20password%3Ddsn-secret", "postgresql:///x?dsn=***"),
        ("postgresql://lg@db/x?passwd=p1&password=p2", "postgresql://lg@db/x?passwd=***&password=***"),
        # SQLAlchemy reads a query past a '#': so does the redaction.
        ("postgresql://lg@db/x#f?password=s", "postgresql://lg@db/x#f?password=***"),
        ("https://hooks.example/cb#access_token=t", "https://hooks.example/cb#access_token=***"),
        # An '@' in the query is no userinfo.
        ("postgresql://db/x?application_name=a@b", "postgresql://db/x?application_name=a@b"),
    ],
)  # fmt: skip
def test_each_credential_form_is_hidden(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_broker_list_splits_only_where_a_url_starts() -> None:
    """A password holding ',' or ';' stays in its URL, not shown as the next 'URL'."""
    text = "kafka://svc:pa,ss;wd@k1:9092,kafka://k2:9092;kafka://u:p@k3:1"
    assert redact_urls(text) == "kafka://svc:***@k1:9092,kafka://k2:9092;kafka://u:***@k3:1"


SECRET = st.text(
    st.sampled_from("abcXYZ019/?#:;,&=%+ \t!$'()*[]~-._"), min_size=6, max_size=20
).filter(lambda text: text.strip() == text)


@given(SECRET)
def test_no_password_sqlalchemy_would_use_shows(password: str) -> None:
    url = f"postgresql+psycopg://loopguard:{password}@db.internal:5432/audit"
    used = make_url(url).password  # SQLAlchemy takes it whole (decoded): the reported case
    assert used == unquote(password)
    assert password not in redact_url(url) and used not in redact_url(url)
    assert redact_url(url) == "postgresql+psycopg://loopguard:***@db.internal:5432/audit"


@given(SECRET.filter(lambda text: "&" not in text and "#" not in text and "+" not in text))
def test_no_secret_argument_sqlalchemy_would_pass_shows(secret: str) -> None:
    for key in ("password", "passwd", "sslpassword", "dsn"):
        url = f"postgresql+psycopg://lg@db/x?sslmode=require&{key}={secret}"
        used = make_url(url).query[key]
        assert isinstance(used, str) and used.strip()
        shown = redact_url(url)
        assert secret not in shown and used not in shown and shown.endswith(f"&{key}=***")


def test_the_settings_log_line_shows_no_part_of_such_a_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from streams.settings import Settings

    monkeypatch.setenv("LOOPGUARD_DB_URL", "postgresql+psycopg://lg:pw/se?cr#et@db/x?dsn=d-s")
    shown = repr(Settings.from_env().redacted())
    assert "lg:***@db/x?dsn=***" in shown
    for secret in ("pw/se", "cr#et", "d-s"):
        assert secret not in shown
