"""A worker's web server for the access tests: the real Faust app and views, the built-in
blueprints applied as ``loopguard worker`` applies them (``Web.init_server``), served by aiohttp
on a free port; requests over ``http.client`` (any Host header, no redirects followed)."""

from __future__ import annotations

import asyncio
import http.client
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import faust
from aiohttp import web as aioweb

from streams.web import register_views


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: str


@dataclass
class Client:
    port: int
    app: Any

    @property
    def host(self) -> str:
        return f"localhost:{self.port}"

    def request(
        self,
        path: str,
        *,
        method: str = "GET",
        host: str | None = None,
        headers: dict[str, str] | None = None,
        body: str | None = None,
    ) -> Reply:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            connection.putheader("Host", self.host if host is None else host)
            sent = dict(headers or {})
            if body is not None:
                sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
                sent["Content-Length"] = str(len(body.encode()))
            for name, value in sent.items():
                connection.putheader(name, value)
            connection.endheaders(body.encode() if body is not None else None)
            response = connection.getresponse()
            return Reply(response.status, response.headers, response.read().decode())
        finally:
            connection.close()

    def get(self, path: str, **options: Any) -> Reply:
        return self.request(path, **options)


@contextmanager
def worker_web(db_url: str, **options: Any) -> Iterator[Client]:
    """``register_views(app, db_url, **options)`` on an app with every built-in Faust
    blueprint switched on, served the way the worker serves it."""
    app = faust.App(
        f"web-{uuid.uuid4().hex[:8]}",
        broker="kafka://127.0.0.1:1",
        web_enabled=True,
        web_stats_enabled=True,
        web_graph_enabled=True,
        web_metrics_enabled=True,
    )
    register_views(app, db_url, **options)
    app.web.init_server()  # Faust's own blueprints, as on `loopguard worker`
    with served(app) as port:
        yield Client(port, app)


@contextmanager
def served(app: faust.App) -> Iterator[int]:
    """The app's aiohttp server on a free loopback port, in a thread with its own loop."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state: dict[str, Any] = {}

    async def start() -> None:
        runner = aioweb.AppRunner(app.web.web_app)
        await runner.setup()
        site = aioweb.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["runner"] = runner
        state["port"] = site._server.sockets[0].getsockname()[1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(20)
    try:
        yield state["port"]
    finally:
        asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(20)
