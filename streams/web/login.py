"""The login form for the status page: the token posted once, then an HttpOnly cookie.

A browser cannot send a bearer header on a plain link, so ``GET /login`` shows a form, ``POST
/login`` checks the token (constant time) and sets ``loopguard_session`` (HttpOnly,
SameSite=Strict, ``Secure`` over HTTPS, 12 hours; :func:`streams.web.access.session_value`),
``POST /logout`` clears it. Without ``LOOPGUARD_WEB_TOKEN`` the form only points to the page.
"""

from __future__ import annotations

from typing import Any

from faust import web

from streams.web.access import COOKIE, LOGIN_PATH, SESSION_SECONDS, WebAccess
from streams.web.markup import HTML_HEADERS, esc, page

HOME = "/status"


#: The longest ``next`` kept (a longer one goes to :data:`HOME`).
NEXT_MAX_CHARS = 2048


def safe_next(target: str | None) -> str:
    """Where to go after login: a path on this server only, else :data:`HOME`.

    A browser resolves ``Location`` with the WHATWG URL parser, which drops tabs and newlines
    anywhere, trims control characters and spaces at the ends and reads ``\\`` as ``/``: so
    ``/\\t/evil``, ``/\\evil`` and `` //evil`` all lead off-site. Rather than strip as it
    does, anything but printable ASCII without a backslash is refused, and what is left must
    start with exactly one ``/`` (a path-absolute URL keeps this origin)."""
    if not target or len(target) > NEXT_MAX_CHARS:
        return HOME
    if not target.startswith("/") or target.startswith("//"):
        return HOME
    if any(not "!" <= ch <= "~" or ch == "\\" for ch in target):
        return HOME
    return target


def login_form(next_path: str, error: str = "") -> str:
    message = f'<p class="error" role="alert">{esc(error)}</p>' if error else ""
    body = f"""<main class="login">
<h1>loopguard</h1>
<p>This worker's pages need its web token (<code>LOOPGUARD_WEB_TOKEN</code>).</p>
{message}
<form method="post" action="{LOGIN_PATH}">
<input type="hidden" name="next" value="{esc(next_path)}">
<label>token <input type="password" name="token" autocomplete="current-password" autofocus
required></label>
<button type="submit">log in</button>
</form>
</main>"""
    return page("loopguard · log in", body)


def session_cookie(value: str, max_age: int, secure: bool) -> str:
    flags = f"Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict"
    return f"{COOKIE}={value}; {flags}" + ("; Secure" if secure else "")


def register_login(app: Any, access: WebAccess) -> None:
    """Add ``/login`` and ``/logout`` to the Faust app's web server."""

    @app.page(LOGIN_PATH, name="loopguard-login")
    class Login(web.View):
        async def get(self, request: web.Request) -> web.Response:
            target = safe_next(request.query.get("next"))
            if not access.token:
                return self.html("", status=303, headers={"Location": target})
            return self.html(login_form(target), headers=dict(HTML_HEADERS))

        async def post(self, request: web.Request) -> web.Response:
            form = await request.post()  # type: ignore[attr-defined]
            target = safe_next(str(form.get("next") or ""))
            given = str(form.get("token") or "")
            if not access.token or access.token_matches(given):
                headers = {"Location": target, "Cache-Control": "no-store"}
                if access.token:
                    cookie = session_cookie(
                        access.new_session(),
                        SESSION_SECONDS,
                        request.secure,  # type: ignore[attr-defined]
                    )
                    headers["Set-Cookie"] = cookie
                return self.html("", status=303, headers=headers)
            text = login_form(target, "wrong token")
            return self.html(text, status=401, headers=dict(HTML_HEADERS))

    @app.page("/logout", name="loopguard-logout")
    class Logout(web.View):
        async def post(self, request: web.Request) -> web.Response:
            headers = {
                "Location": LOGIN_PATH,
                "Set-Cookie": session_cookie("", 0, request.secure),  # type: ignore[attr-defined]
            }
            return self.html("", status=303, headers=headers)
