"""What the webhooks say of an operator's release and of a held block (issue 43)."""

from __future__ import annotations

from typing import Any

from streams.core.events import RELEASE_DETECTOR, Action, Decision
from streams.webhooks.notifier import notifies, slack_body

HOLD = {"on_block": "hold", "hold_timeout_seconds": 120, "hold_default": "abort"}


def decision(action: Action = Action.BLOCK, **overrides: Any) -> Decision:
    values: dict[str, Any] = {
        "run_id": "run/1",
        "agent_id": "coder",
        "gateway_id": "gw-1",
        "seq": 9,
        "event_time": 1_700_000_000_000,
        "action": action,
        "detector": "generic_repeat",
        "severity": "critical",
        "count": 20,
        "tool_name": "read_file",
        "reason": "CRITICAL: the same read 20 times",
    }
    values.update(overrides)
    return Decision(**values)


def test_a_held_block_offers_release_and_abort_with_links_to_the_web_ui() -> None:
    body = slack_body(decision(extra=HOLD), "https://lg.example.com")
    hold = body["hold"]
    assert hold["run_page"] == "https://lg.example.com/status/run?id=run%2F1"
    assert hold["release_url"] == "https://lg.example.com/runs/run%2F1/release"
    assert hold["abort_url"] == "https://lg.example.com/runs/run%2F1/abort"
    assert (hold["timeout_seconds"], hold["default"]) == (120, "abort")
    (actions,) = [b for b in body["blocks"] if b["type"] == "actions"]
    buttons = {e["text"]["text"]: e["url"] for e in actions["elements"]}
    assert buttons == {
        "Release": "https://lg.example.com/status/run?id=run%2F1#operator",
        "Abort": "https://lg.example.com/status/run?id=run%2F1#operator",
    }
    assert "holds this call for up to 120 s" in body["text"]
    assert body["blocks"][-1]["type"] == "context"  # the decision id stays last


def test_without_a_public_url_the_notice_says_held_but_carries_no_links() -> None:
    body = slack_body(decision(extra=HOLD))
    assert "holds this call" in body["text"] and set(body["hold"]) == {"timeout_seconds", "default"}
    assert not [b for b in body["blocks"] if b["type"] == "actions"]


def test_a_plain_block_is_unchanged_and_a_release_is_posted() -> None:
    plain = slack_body(decision())
    assert "hold" not in plain and not [b for b in plain["blocks"] if b["type"] == "actions"]
    release = decision(
        Action.WARN, detector=RELEASE_DETECTOR, reason="released by bob: fine (warnings only)"
    )
    assert notifies(release) and notifies(decision())
    assert not notifies(decision(Action.WARN)) and not notifies(decision(enforced=False))
    assert slack_body(release)["text"].startswith("loopguard released run run/1")
