"""The config follower judges each record by its effect (issue 40): a change that leaves a
canonical loop unstopped is logged at WARNING as "guarding weakened", carries the loops it
lost to the audit trail (``config history``), the status page and the webhook; a poison
record is refused and recorded, and the next record applies."""

from __future__ import annotations

import json
from collections import namedtuple

from streams.audit.config_changes import config_history, record_change
from streams.audit.store import AuditStore
from streams.cli.main import main
from streams.core.config import resolve
from streams.core.config_change import WEAKENED_LABEL, ConfigChange, alarming
from streams.kafka.config_topic import ConfigWatcher
from streams.web.status_page import render_config_card
from streams.webhooks.config_notice import config_change_body

Record = namedtuple("Record", "topic partition offset timestamp key value headers")
HEADERS = [("loopguard-user", b"mallory"), ("loopguard-host", b"laptop")]


def watcher() -> tuple[ConfigWatcher, list[ConfigChange]]:
    follower = ConfigWatcher(["127.0.0.1:1"], "lg.config")
    follower.resolve = lambda key: resolve(follower.get("*") or {"enabled": True})
    seen: list[ConfigChange] = []
    follower.on_change = seen.append
    return follower, seen


def feed(follower: ConfigWatcher, offset: int, value: bytes | None, key: bytes = b"*") -> None:
    record = Record("lg.config", 0, offset, 1_700_000_000_000 + offset, key, value, HEADERS)
    follower._on_record(record)  # noqa: SLF001 - the follower's callback, without a broker


def test_a_weakening_star_record_is_flagged_at_warning(caplog) -> None:
    follower, seen = watcher()
    with caplog.at_level("INFO", logger="loopguard.config"):
        feed(follower, 1, b'{"enabled": true, "historySize": 1}')
    change = seen[0]
    assert change.action == "set" and not change.disables and alarming(change)
    assert change.weakened.startswith("no longer stopped: identical calls")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith(f"{WEAKENED_LABEL} by the config")
    assert "mallory@laptop" in warnings[0] and '"historySize":1' in warnings[0]


def test_a_harmless_record_is_not_flagged(caplog) -> None:
    follower, seen = watcher()
    with caplog.at_level("INFO", logger="loopguard.config"):
        feed(follower, 1, b'{"enabled": true, "warningThreshold": 8}')
    assert seen[0].weakened == "" and not alarming(seen[0])
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_an_agent_record_is_judged_for_that_agent() -> None:
    follower, seen = watcher()
    follower.resolve = lambda key: resolve(
        {"enabled": True, **(follower.get(key) or {})} if key != "*" else {"enabled": True}
    )
    feed(follower, 1, b'{"mode": "observe"}', b"coder")
    change = seen[0]
    assert change.agent_key == "coder" and not change.disables  # only * turns the fleet off
    assert "ping-pong" in change.weakened and alarming(change)


def test_a_poison_record_is_refused_and_recorded_then_a_good_one_applies() -> None:
    follower, seen = watcher()
    feed(follower, 1, b"[" * 50_000 + b"]" * 50_000)
    feed(follower, 2, b'{"enabled": true, "warningThreshold": 6}')
    refused, applied = seen
    assert refused.action == "refused" and "nested deeper than" in refused.error
    assert applied.action == "set" and follower.get("*") == {
        "enabled": True,
        "warningThreshold": 6,
    }


def test_history_status_page_and_webhook_show_the_weakening(
    audit_store: AuditStore, capsys
) -> None:
    follower, seen = watcher()
    feed(follower, 7, b'{"enabled": true, "detectors": {"unchangedOutcome": false}}')
    change = seen[0]
    assert record_change(audit_store, change)
    assert config_history(audit_store)[0].weakened == change.weakened
    url = audit_store.url.render_as_string(hide_password=False)
    assert main(["config", "history", "--db", url]) == 0
    out = capsys.readouterr().out
    assert f"set ({WEAKENED_LABEL})" in out
    assert f"{WEAKENED_LABEL} by the change of * at" in out and "unchanged outcome" in out
    assert main(["config", "history", "--db", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["weakened"] == change.weakened
    card = render_config_card(change, now_ms=change.changed_at)
    assert "state-bad" in card and WEAKENED_LABEL in card
    body = config_change_body(change)
    assert body["text"].startswith("loopguard guarding weakened for every agent")
    assert "unchanged outcome" in body["text"]
