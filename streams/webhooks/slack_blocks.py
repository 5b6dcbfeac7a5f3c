"""The Slack-compatible message every webhook notice posts (decision, config change,
incident): one builder, so the three notices share Slack's escapes, limits and block order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

TEXT_LIMIT = 3000
HEADER_LIMIT = 150
SECTION_LIMIT = 2900
FIELD_LIMIT = 1900


def escape(text: str, limit: int) -> str:
    """Slack mrkdwn: escape the three control characters and keep within Slack's limits."""
    clipped = text if len(text) <= limit else text[: limit - 1] + "…"
    return clipped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": escape(text, SECTION_LIMIT)}}


def slack_message(
    *,
    text: str,
    header: str,
    lead: str,
    fields: Iterable[tuple[str, str]],
    context: str,
    trailing: Sequence[str] = (),
) -> dict[str, Any]:
    """Slack's ``text`` (the notification line) plus ``blocks``: a header, the ``lead``
    section, one field per ``(label, value)``, any ``trailing`` sections and a context line.
    Values are escaped and clipped here; an empty field value shows as ``-``."""
    return {
        "text": escape(text, TEXT_LIMIT),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": header[:HEADER_LIMIT]}},
            _section(lead),
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*{label}*\n{escape(value or '-', FIELD_LIMIT)}"}
                    for label, value in fields
                ],
            },
            *(_section(extra) for extra in trailing),
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": escape(context, FIELD_LIMIT)}],
            },
        ],
    }
