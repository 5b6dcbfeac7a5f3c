"""The webhook notice of a config change that turns guarding off, or to observe only, for
every agent (issue 26), or that weakens it by its effect (issue 40): Slack-compatible like a
decision's notice, posted once."""

from __future__ import annotations

import json
from typing import Any

from streams.audit.webhook_outbox import Notice
from streams.core.config_change import ConfigChange
from streams.webhooks.slack_blocks import slack_message


def _what(change: ConfigChange) -> str:
    try:
        block = json.loads(change.value or "{}")
    except ValueError:
        block = {}
    return "off" if isinstance(block, dict) and block.get("enabled") is False else "to observe only"


def _subject(change: ConfigChange) -> str:
    return "every agent" if change.agent_key == "*" else f"agent {change.agent_key}"


def config_change_body(change: ConfigChange) -> dict[str, Any]:
    """Slack's ``text`` (the notification line) plus ``blocks``: a header, the value, one
    field each for key, sender, source and versions, and where the record is. A change that
    weakens guarding by its effect (issue 40) says which canonical loops go unstopped."""
    versions = f"{change.version_before or '?'} -> {change.version_after or '?'}"
    if change.disables:
        what = f"turned {_what(change)}"
        text = (
            f"loopguard guarding {what} for every agent by a config change from "
            f"{change.sender}: {change.value} (config version {versions})"
        )
    else:
        what = "weakened"
        text = (
            f"loopguard guarding weakened for {_subject(change)} by a config change from "
            f"{change.sender}: {change.value} (config version {versions}); "
            f"{change.weakened}"
        )
    fields = (
        ("Key", change.agent_key),
        ("Sender", change.sender),
        ("Source", change.source),
        ("Config version", versions),
    )
    where = f"{change.topic}[{change.partition}]@{change.offset}" if change.topic else "-"
    return slack_message(
        text=text,
        header=f"loopguard guarding {what}",
        lead=change.value or "",
        fields=fields,
        context=f"config change {where}",
    )


def config_change_notice(change: ConfigChange) -> Notice:
    """The outbox entry of a config change; its key (``config:`` + the change id) keeps it to
    one post whichever worker, and however many, recorded the change."""
    return Notice(
        decision_id=f"config:{change.change_id}",
        run_id="",
        agent_id=change.agent_key,
        action="config",
        body=json.dumps(config_change_body(change), ensure_ascii=False),
    )
