"""Release and abort from the web UI (issue 43): the run page's "Operator controls" (the
run's releases and aborts from the audit trail, and a form for each), and the endpoints the
forms, a held call's webhook and scripts post to: ``POST /runs/{run_id}/release`` (fields
``reason``, ``calls``, ``by``) and ``POST /runs/{run_id}/abort`` (``reason``, ``by``).

Both publish the same command ``loopguard release`` / ``loopguard abort`` does. They need
the web token (a bearer header, or the login cookie, which is SameSite=Strict so another
site's page cannot post with it), and refuse a request whose Origin names another site; a
worker without ``LOOPGUARD_WEB_TOKEN`` refuses them: releasing a run is a control action.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from faust import web

from streams.audit.releases import KnownRun, OperatorRelease, known_run, read_releases
from streams.core.operator_command import ABORT, DEFAULT_RELEASE_CALLS, RELEASE, OperatorCommand
from streams.web.access import WebAccess, host_name
from streams.web.markup import esc, when

SendCommands = Callable[[Sequence[OperatorCommand]], Any]
MAX_REASON = 2000


class Refused(Exception):
    """A release or abort the endpoint will not send: the message and HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def operator_section(
    run_id: str, releases: Sequence[OperatorRelease], active: bool, enabled: bool
) -> str:
    """The run page's operator controls: past releases and aborts, and the two forms (only
    while the run is active and the worker can send them)."""
    rows = "".join(
        f"<tr><td>{esc(when(r.requested_at))}</td><td>{esc(r.command)}</td>"
        f"<td>{esc(r.released_by)}</td><td>{esc(r.source)}</td>"
        f"<td>{esc(str(r.calls) if r.calls is not None else '-')}</td>"
        f"<td>{esc(r.released_detector or '-')}</td>"
        f'<td class="reason">{esc(r.reason)}</td></tr>'
        for r in releases
    )
    table = (
        '<table id="releases"><thead><tr><th>time (UTC)</th><th>command</th><th>by</th>'
        "<th>from</th><th>calls</th><th>stop lifted</th><th>reason</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        if rows
        else '<p class="muted" id="releases">no release or abort of this run</p>'
    )
    forms = ""
    if not enabled:
        forms = (
            '<p class="muted">Releasing from the web needs LOOPGUARD_WEB_TOKEN on this '
            "worker; use <code>loopguard release</code>.</p>"
        )
    elif active:
        run = quote(run_id, safe="")
        forms = f"""<form method="post" action="/runs/{esc(run)}/release" id="release-form">
<label>reason <input name="reason" required maxlength="{MAX_REASON}"></label>
<label>warnings only for <input name="calls" type="number" min="1"
value="{DEFAULT_RELEASE_CALLS}"> calls</label>
<label>by <input name="by"></label>
<button type="submit">Release</button></form>
<form method="post" action="/runs/{esc(run)}/abort" id="abort-form">
<label>reason <input name="reason" required maxlength="{MAX_REASON}"></label>
<label>by <input name="by"></label>
<button type="submit">Abort</button></form>"""
    return f'<h2 id="operator">Operator controls</h2>{table}{forms}'


def same_site(request: web.Request) -> bool:
    """A browser names the page a POST came from (Origin): it must be this worker."""
    origin = request.headers.get("Origin")
    if not origin or origin == "null":
        return origin is None
    return host_name(urlsplit(origin).netloc) == host_name(request.headers.get("Host", ""))


async def read_form(request: web.Request) -> dict[str, str]:
    if request.content_type == "application/json":  # type: ignore[attr-defined]
        body = await request.json()  # type: ignore[attr-defined]
        if not isinstance(body, dict):
            raise Refused("expected a JSON object", 400)
        return {k: str(v) for k, v in body.items() if v is not None}
    form = await request.post()  # type: ignore[attr-defined]
    return {k: str(v) for k, v in form.items()}


def build_web_command(run: KnownRun, verb: str, fields: dict[str, str]) -> OperatorCommand:
    """The command a form or script asks for; :class:`Refused` for bad fields."""
    from streams.kafka.operator_commands import build_command, new_release_id

    reason = fields.get("reason", "").strip()
    if not reason:
        raise Refused("reason: say why (it is recorded)", 400)
    calls: int | None = None
    if verb == RELEASE:
        text = fields.get("calls", "").strip() or str(DEFAULT_RELEASE_CALLS)
        if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
            raise Refused(f"calls: expected a whole number from 1, got {text[:20]!r}", 400)
        calls = int(text)
    return build_command(
        run.run_id,
        run.agent_id,
        verb,
        release_id=new_release_id(),
        reason=reason[:MAX_REASON],
        released_by=(fields.get("by", "").strip() or "web")[:200],
        calls=calls,
        source="web",
    )


def register_operator_views(
    app: Any, run_in_store: Callable[..., Any], access: WebAccess, send: SendCommands | None
) -> None:
    """Add the release and abort endpoints. ``run_in_store(work)``: awaitable, runs
    ``work(store)`` in a thread; ``send``: publishes commands (None: refused, 503)."""

    async def act(view: web.View, request: web.Request, run_id: str, verb: str) -> web.Response:
        wants_html = "text/html" in request.headers.get("Accept", "")
        try:
            if not access.token:
                raise Refused("set LOOPGUARD_WEB_TOKEN to release or abort runs from the web", 403)
            if not same_site(request):
                raise Refused("refused: the request came from another site (Origin)", 403)
            if send is None:
                raise Refused("this worker cannot publish commands", 503)
            fields = await read_form(request)

            def lookup(store: Any) -> KnownRun | None:
                with store.engine.connect() as conn:
                    return known_run(conn, run_id)

            run = await run_in_store(lookup)
            if run is None:
                raise Refused(f"no run {run_id!r} in the audit trail", 404)
            if run.status != "active":
                raise Refused(f"run {run_id} is {run.status}: nothing to {verb}", 409)
            command = build_web_command(run, verb, fields)
            await asyncio.to_thread(send, [command])
        except Refused as exc:
            if wants_html:
                return view.text(f"{exc}\n", status=exc.status)
            return view.json({"error": str(exc)}, status=exc.status)
        if wants_html:
            page = f"/status/run?{urlencode({'id': run_id})}#operator"
            return view.html("", status=303, headers={"Location": page})
        return view.json(
            {
                "sent": verb,
                "run_id": run_id,
                "release_id": command.release_id,
                "calls": command.calls,
            },
            status=202,
        )

    @app.page("/runs/{run_id}/release", name="loopguard-run-release")
    class Release(web.View):
        async def post(self, request: web.Request, run_id: str) -> web.Response:
            return await act(self, request, run_id, RELEASE)

    @app.page("/runs/{run_id}/abort", name="loopguard-run-abort")
    class Abort(web.View):
        async def post(self, request: web.Request, run_id: str) -> web.Response:
            return await act(self, request, run_id, ABORT)


def load_releases(store: Any, run_id: str) -> list[OperatorRelease]:
    """The run's releases and aborts (none when the table is not there yet)."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with store.engine.connect() as conn:
            return read_releases(conn, run_id=run_id)
    except SQLAlchemyError:
        return []
