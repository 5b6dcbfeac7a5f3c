"""Out-of-range query parameters are a 400 with one line, never a 500 (issue 26, item 5):
``since``/``until`` past what a datetime can show once took the status page's chart down."""

from __future__ import annotations

import pytest
from web_client import worker_web

from streams.audit.store import AuditStore
from streams.web.params import MAX_EPOCH_MS, BadRequest, runs_filters, status_query

HUGE = "9" * 30
BAD = [
    f"/status?until={HUGE}",
    f"/status?since={HUGE}",
    "/status?until=1000000000000000000",
    f"/status?since=1&until={MAX_EPOCH_MS + 1}",
    "/status?since=-1",
    "/status?limit=0",
    f"/status?limit={HUGE}",
    "/status?refresh=-5",
    "/status?since=" + "1" * 5000,  # past Python's int digits limit
    f"/runs?since={HUGE}",
    f"/runs?until={MAX_EPOCH_MS + 1}",
    "/runs?limit=-1",
    f"/runs?limit={HUGE}",
    "/runs?since=1e5",
]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('params') / 'audit.db'}"
    AuditStore(url).migrate()
    with worker_web(url) as running:
        yield running


@pytest.mark.parametrize("path", BAD)
def test_out_of_range_is_a_400_in_one_line(client, path: str) -> None:
    reply = client.get(path)
    assert reply.status == 400, (path, reply.body[:200])
    assert len(reply.body) < 300 and reply.body.strip().count("\n") == 0


@pytest.mark.parametrize(
    "path",
    [
        f"/status?until={MAX_EPOCH_MS}",
        f"/status?since={MAX_EPOCH_MS - 1000}&until={MAX_EPOCH_MS}",
        f"/status?since={MAX_EPOCH_MS - 1}",
        "/status?since=0&until=1",
        f"/runs?since={MAX_EPOCH_MS}&until=0",
    ],
)
def test_the_edges_of_the_range_are_served(client, path: str) -> None:
    assert client.get(path).status == 200, path


def test_the_bounds_are_named_in_the_error() -> None:
    with pytest.raises(BadRequest, match=rf"until: must be between 0 and {MAX_EPOCH_MS}"):
        status_query({"until": str(MAX_EPOCH_MS + 1)})
    with pytest.raises(BadRequest, match=r"since: expected a whole number, got '1{40}\.\.\. "):
        runs_filters({"since": "1" * 5000})
    assert runs_filters({"since": str(MAX_EPOCH_MS)})["since_ms"] == MAX_EPOCH_MS
