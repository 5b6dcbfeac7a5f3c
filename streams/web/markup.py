"""HTML building blocks shared by the status and run pages; every caller escapes with ``esc``."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

from streams.audit.queries import ACTION_ORDER

STATIC_PREFIX = "/static/loopguard/"
CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HTML_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

esc = html.escape


def when(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "–"
    try:
        return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(epoch_ms)


def ago(epoch_ms: int | None, now_ms: int) -> str:
    if epoch_ms is None:
        return "never"
    seconds = (now_ms - epoch_ms) / 1000
    if seconds < 0:
        return "in the future (gateway clock ahead)" if seconds < -60 else "just now"
    return f"{duration(seconds)} ago" if seconds >= 1 else "just now"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"


def badge(action: str) -> str:
    known = action if action in ACTION_ORDER else "unknown"
    return f'<span class="badge {known}">{esc(action)}</span>'


def action_badge(action: str, observed: bool) -> str:
    """The action's badge, marked when nothing enforced it (mode "observe", shadow mode)."""
    if not observed:
        return badge(action)
    return badge(action) + ' <span class="badge observed">observe only</span>'


def page(title: str, body: str, refresh: int = 0) -> str:
    refresh_attr = f' data-refresh="{refresh}"' if refresh else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<link rel="icon" href="{STATIC_PREFIX}favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="{STATIC_PREFIX}status.css">
<script src="{STATIC_PREFIX}status.js" defer></script>
</head>
<body{refresh_attr}>
{body}
</body></html>
"""


def header(app_id: str, now_ms: int, subtitle: str) -> str:
    return f"""<header>
<h1>loopguard <span class="muted">&middot; {esc(subtitle)}</span></h1>
<nav><a href="/status">status</a><a href="/metrics">metrics</a><a href="/healthz">healthz</a>
<a href="/runs">runs JSON</a></nav>
<span class="muted small">worker {esc(app_id)} &middot; {esc(when(now_ms))} UTC</span>
</header>"""


def definition_list(items: list[tuple[str, str]]) -> str:
    """A definition list; values are already-escaped HTML."""
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f"<dl>{rows}</dl>"


def plain(value: Any) -> str:
    """A value for people, escaped; an object or a list as :func:`readable` writes it."""
    if isinstance(value, dict | list | tuple):
        return readable(value)
    return esc("–" if value is None else str(value))


def field_label(key: str) -> str:
    """A health field's name for people: ``last_write_age_seconds`` -> ``last write``."""
    for suffix in ("_age_seconds", "_seconds"):
        if key.endswith(suffix):
            key = key.removesuffix(suffix)
    return key.replace("_", " ")


def field_value(key: str, value: Any) -> str:
    """A health field's value with its unit (``8.8 s ago``, ``2 s``)."""
    if key.endswith("_age_seconds"):
        return f"{value} s ago"
    if key.endswith("_seconds"):
        return f"{value} s"
    return _scalar(value)


def readable(value: Any) -> str:
    """An object as its fields for people, never raw JSON: ``status ok · backlog 0 · last
    write 8.8 s ago`` (health fields, unset ones left out), nested keys dotted."""
    pairs = _pairs(value, "")
    return esc(" · ".join(f"{field_label(k)} {field_value(k, v)}".strip() for k, v in pairs))


def config_text(value: Any) -> str:
    """A config document or block for people: its settings as ``path=value``, nested keys
    dotted (``tools.loopDetection.enabled=true``), separated by ``; ``; not escaped."""
    return "; ".join(f"{k}={_scalar(v)}" if k else _scalar(v) for k, v in _pairs(value, ""))


def _pairs(value: Any, prefix: str) -> list[tuple[str, Any]]:
    """The leaves of ``value`` with their dotted paths; unset (None) leaves left out, an
    empty object or list as ``none``, a list of plain values as one leaf."""
    if isinstance(value, dict):
        if not value:
            return [(prefix, "none")] if prefix else []
        found: list[tuple[str, Any]] = []
        for key, item in value.items():
            found += _pairs(item, f"{prefix}.{key}" if prefix else str(key))
        return found
    if isinstance(value, list | tuple):
        if all(not isinstance(item, dict | list | tuple) for item in value):
            return [(prefix, ", ".join(_scalar(item) for item in value) or "none")]
        found = []
        for index, item in enumerate(value):
            found += _pairs(item, f"{prefix}[{index}]")
        return found
    return [] if value is None else [(prefix, value)]


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
