"""What a webhook says of an operator's release and of a held block (issue 43): a release
names who let the run go on and why; a block whose gateway holds the call (``onBlock:
"hold"``) offers the operator release or abort before ``holdDefault`` happens: the JSON
carries the web UI's endpoints (POST, token-protected) and Slack gets buttons that open the
run's page, where the release and abort forms are (a link can only GET)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from streams.core.events import Decision


def is_held(decision: Decision) -> bool:
    return decision.extra.get("on_block") == "hold"


def hold_links(decision: Decision, base_url: str) -> dict[str, Any]:
    """The ``hold`` object of a held block's payload: its timeout and default, and with a
    public URL the run page and the release and abort endpoints."""
    hold: dict[str, Any] = {
        "timeout_seconds": decision.extra.get("hold_timeout_seconds"),
        "default": decision.extra.get("hold_default"),
    }
    if base_url:
        run = quote(decision.run_id, safe="")
        hold["run_page"] = f"{base_url}/status/run?{urlencode({'id': decision.run_id})}"
        hold["release_url"] = f"{base_url}/runs/{run}/release"
        hold["abort_url"] = f"{base_url}/runs/{run}/abort"
    return hold


def hold_line(decision: Decision) -> str:
    """The sentence a held block's notice adds."""
    timeout = decision.extra.get("hold_timeout_seconds")
    default = decision.extra.get("hold_default")
    return (
        f"The gateway holds this call for up to {timeout} s: release the run to let it go "
        f"on, or abort it; with no answer it will {default}."
    )


def hold_actions(links: dict[str, Any]) -> dict[str, Any] | None:
    """Slack's buttons for a held block (both open the run page's forms)."""
    page = links.get("run_page")
    if not page:
        return None
    return {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Release"},
                "style": "primary",
                "url": f"{page}#operator",
                "action_id": "loopguard-release",
            },
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Abort"},
                "style": "danger",
                "url": f"{page}#operator",
                "action_id": "loopguard-abort",
            },
        ],
    }


def add_hold(body: dict[str, Any], decision: Decision, base_url: str) -> dict[str, Any]:
    """``body`` (a Slack message) with a held block's line, buttons and ``hold`` object."""
    links = hold_links(decision, base_url)
    blocks = body["blocks"]
    blocks.insert(
        len(blocks) - 1,
        {"type": "section", "text": {"type": "mrkdwn", "text": hold_line(decision)}},
    )
    actions = hold_actions(links)
    if actions is not None:
        blocks.insert(len(blocks) - 1, actions)
    body["text"] = f"{body['text']} {hold_line(decision)}"
    body["hold"] = links
    return body
