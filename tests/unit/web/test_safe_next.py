"""``safe_next`` against a real WHATWG URL parser (ada, the one Node uses): whatever the login
form is given, the ``Location`` it answers resolves, in a browser, to this server (issue 40,
item 8)."""

from __future__ import annotations

import pytest
from ada_url import URL
from hypothesis import example, given
from hypothesis import strategies as st

from streams.web.login import HOME, NEXT_MAX_CHARS, safe_next

BASE = "http://127.0.0.1:6066/login"
ORIGIN = URL(BASE).origin


def lands_here(location: str) -> bool:
    return URL(location, BASE).origin == ORIGIN


def test_the_parser_reads_the_reported_attack_off_site() -> None:
    """What the old check let through: the browser's parser does lead off-site."""
    assert not lands_here("/\t/evil.example")
    assert not lands_here("/\\evil.example")
    assert not lands_here(" //evil.example")


@pytest.mark.parametrize(
    "target",
    [
        "/\t/evil.example",
        "/\n/evil.example",
        "/\r/evil.example",
        "\t//evil.example",
        " //evil.example",
        "\x00//evil.example",
        "/\\evil.example",
        "/\t\\evil.example",
        "\\\\evil.example",
        "//evil.example",
        "https://evil.example/",
        "javascript:alert(1)",
        "/status\x7f",
        "/ok\u3000",
        "/" + "a" * NEXT_MAX_CHARS,
    ],
)
def test_anything_a_browser_could_read_off_site_goes_home(target: str) -> None:
    assert safe_next(target) == HOME


@pytest.mark.parametrize(
    "target",
    ["/status", "/runs?limit=1", "/status/run?id=r-1&window=1h#top", "/%09/x", "/a/../..//x"],
)
def test_a_path_of_this_server_is_kept_as_given(target: str) -> None:
    assert safe_next(target) == target and lands_here(target)


PIECES = st.sampled_from(
    ["/", "\\", "\t", "\n", "\r", " ", "\x00", "\x0c", ".", ":", "@", "?", "#", "%", "09",
     "2F", "5C", "evil.example", "http", "javascript", "\u3000", "\uff0f", "a"]
)  # fmt: skip


@given(st.lists(PIECES, max_size=12).map("".join))
@example("/\t/evil.example")
@example("/%2F%2Fevil.example")
def test_every_location_resolves_to_this_server(target: str) -> None:
    location = safe_next(target)
    assert lands_here(location)
    assert location in (target, HOME)
