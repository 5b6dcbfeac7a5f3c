"""Who the worker's web server answers: the Host header, the routes, a token (issue 26).

Three checks, in this order, on every request (one aiohttp middleware):

1. **Host.** A name not configured gets 400: a DNS-rebinding page (``evil.example`` resolving to
   127.0.0.1) always sends its own name, so it never reaches a view. IP literals pass: a
   browser sends one only when the page itself came from that address, so they cannot be
   rebound, and Prometheus scrapes workers by address.
2. **Routes.** Only loopguard's own pages are served (those registered with a name starting
   ``loopguard-``); Faust's built-in ``/router/``, ``/table/``, ``/graph/``, ``/stats/``, its
   index page and any other built-in route answer 404.
3. **Token.** With ``LOOPGUARD_WEB_TOKEN`` set, the status page and the JSON API need
   ``Authorization: Bearer <token>`` or the login cookie (:mod:`streams.web.login`);
   ``/healthz`` and ``/metrics`` only when configured so. Without a token everything stays
   open, as before, and the worker says so once in its log.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from aiohttp import web as aioweb

log = logging.getLogger("loopguard.web")

ROUTE_PREFIX = "loopguard-"  # the names of the views this server may serve
COOKIE = "loopguard_session"
SESSION_SECONDS = 12 * 3600
LOGIN_PATH = "/login"
#: Browser pages: without credentials they send the visitor to the login form (the JSON API
#: and the probes answer 401 instead).
PAGE_PATHS = frozenset({"/status", "/status/run"})
#: Served to anyone whose Host passes: the login form and the page's stylesheet and icon.
PUBLIC_PATHS = frozenset({LOGIN_PATH, "/logout"})
PUBLIC_PREFIX = "/static/loopguard/"
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "*"})

Handler = Callable[[aioweb.Request], Awaitable[aioweb.StreamResponse]]


def default_hosts(bind: str) -> tuple[str, ...]:
    """localhost and loopback, the bind address, and this machine's name when bound to all."""
    hosts = ["localhost", "127.0.0.1", "::1"]
    if bind in WILDCARD_BINDS:
        hosts.append(socket.gethostname().lower())
    elif bind.lower() not in hosts:
        hosts.append(bind.lower())
    return tuple(hosts)


def parse_hosts(text: str, bind: str) -> tuple[str, ...]:
    """``LOOPGUARD_WEB_ALLOWED_HOSTS``: names (``.example.com`` for it and its subdomains),
    comma-separated; ``*`` any; empty: :func:`default_hosts`."""
    names = tuple(name.strip().lower().rstrip(".") for name in text.split(",") if name.strip())
    return names or default_hosts(bind)


def host_name(header: str) -> str | None:
    """The host of a Host header (``[::1]:6066`` → ``::1``), lower case; None if malformed."""
    try:
        parts = urlsplit(f"//{header}")
        name = parts.hostname
        parts.port  # noqa: B018 - raises on a port that is not one
    except ValueError:
        return None
    return name.rstrip(".") if name else None


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def session_value(token: str, expires: int) -> str:
    """The login cookie: its expiry and an HMAC of it keyed with the token (the cookie never
    holds the token itself; a new token ends every session)."""
    mac = hmac.new(token.encode(), f"loopguard-web-session:{expires}".encode(), hashlib.sha256)
    return f"{expires}.{mac.hexdigest()}"


@dataclass(frozen=True)
class WebAccess:
    """The web server's access settings (``LOOPGUARD_WEB_*``)."""

    token: str = ""
    token_healthz: bool = False  # probes (compose, Kubernetes) rarely carry a token
    token_metrics: bool = False  # Prometheus can (authorization: credentials), often doesn't
    allowed_hosts: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")

    @classmethod
    def from_settings(cls, settings: Any) -> WebAccess:
        return cls(
            token=settings.web_token,
            token_healthz=settings.web_token_healthz,
            token_metrics=settings.web_token_metrics,
            allowed_hosts=parse_hosts(settings.web_allowed_hosts, settings.web_bind),
        )

    def host_allowed(self, header: str | None) -> bool:
        if "*" in self.allowed_hosts or not header:  # no Host at all: not a browser
            return True
        name = host_name(header)
        if name is None:
            return False
        if is_ip_literal(name) or name in self.allowed_hosts:
            return True
        return any(
            allowed.startswith(".") and (name == allowed[1:] or name.endswith(allowed))
            for allowed in self.allowed_hosts
        )

    def needs_token(self, path: str) -> bool:
        if not self.token or path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX):
            return False
        if path == "/healthz":
            return self.token_healthz
        if path == "/metrics":
            return self.token_metrics
        return True

    def new_session(self, now: float | None = None) -> str:
        expires = int(now if now is not None else time.time()) + SESSION_SECONDS
        return session_value(self.token, expires)

    def session_valid(self, cookie: str, now: float | None = None) -> bool:
        expires_text, _, _ = cookie.partition(".")
        if not expires_text.isdigit() or len(expires_text) > 12:
            return False
        expires = int(expires_text)
        if expires < (now if now is not None else time.time()):
            return False
        return hmac.compare_digest(cookie.encode(), session_value(self.token, expires).encode())

    def token_matches(self, given: str) -> bool:
        """Constant-time: how long a guess matched says nothing."""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def authenticated(self, request: aioweb.Request) -> bool:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value.strip() and self.token_matches(value.strip()):
            return True
        cookie = request.cookies.get(COOKIE)
        return bool(cookie) and self.session_valid(cookie)


def one_line(text: str, status: int, **headers: str) -> aioweb.Response:
    return aioweb.Response(text=text + "\n", status=status, headers=headers)


def login_redirect(request: aioweb.Request) -> aioweb.Response:
    """303 to the login form, which comes back here once the token is given."""
    target = quote(request.path_qs, safe="")
    return aioweb.Response(status=303, headers={"Location": f"{LOGIN_PATH}?next={target}"})


def middleware(access: WebAccess, served_paths: Callable[[], Iterable[str]]) -> Any:
    """The aiohttp middleware that applies the three checks (module docstring).

    ``served_paths``: the route patterns of loopguard's own views, read per request (views
    may be added after this is installed)."""

    @aioweb.middleware
    async def guard(request: aioweb.Request, handler: Handler) -> aioweb.StreamResponse:
        host = request.headers.get("Host")
        if not access.host_allowed(host):
            shown = (host or "")[:100].encode("ascii", "backslashreplace").decode()
            return one_line(
                f"bad Host header {shown!r}: not a name of this worker "
                "(LOOPGUARD_WEB_ALLOWED_HOSTS)",
                400,
            )
        resource = request.match_info.route.resource
        if resource is None or resource.canonical not in set(served_paths()):
            return one_line("not found", 404)
        if access.needs_token(request.path) and not access.authenticated(request):
            if request.path in PAGE_PATHS and "Authorization" not in request.headers:
                return login_redirect(request)
            return one_line(
                "unauthorized: send Authorization: Bearer <LOOPGUARD_WEB_TOKEN>",
                401,
                **{"WWW-Authenticate": 'Bearer realm="loopguard"'},
            )
        return await handler(request)

    return guard


def install(app: Any, access: WebAccess) -> None:
    """Put the checks in front of every route of the Faust app's web server."""
    web = app.web

    def served_paths() -> Iterable[str]:
        return (
            path
            for path, view in web.views.items()
            if str(getattr(view, "view_name", "")).startswith(ROUTE_PREFIX)
        )

    web.web_app.middlewares.append(middleware(access, served_paths))
    if not access.token and app.conf.web_enabled:
        log.warning(
            "web: no LOOPGUARD_WEB_TOKEN set: the status page, /runs, /healthz and /metrics "
            "answer anyone who can reach %s:%s",
            app.conf.web_bind,
            app.conf.web_port,
        )
