"""Config changes in the audit trail (issue 26): stored once per record, listed newest first,
the file recorded only when it changed, the recorder never waits for the database."""

from __future__ import annotations

import json
import threading
from collections import namedtuple
from dataclasses import replace

import pytest

from streams.audit.config_changes import (
    ConfigChangeRecorder,
    config_history,
    latest_change,
    record_change,
    record_file_change,
)
from streams.audit.store import AuditStore
from streams.cli.main import main
from streams.core.config import ConfigError, resolve
from streams.core.config_change import (
    CLIENT_ID_HEADER,
    HOST_HEADER,
    PRINCIPAL_HEADER,
    SOURCE_CLI,
    SOURCE_HEADER,
    USER_HEADER,
    ConfigChange,
)
from streams.core.fleet import FleetConfig
from streams.kafka.config_topic import ConfigWatcher, change_from_record
from streams.webhooks.config_notice import config_change_body, config_change_notice
from streams.worker.config_audit import file_change

Record = namedtuple("Record", "topic partition offset timestamp key value headers")


def change(n: int, key: str = "*", **fields: object) -> ConfigChange:
    base = ConfigChange(
        change_id=f"lg.config:0:{n}",
        source="topic",
        action="set",
        agent_key=key,
        value='{"enabled":true}',
        changed_at=1_700_000_000_000 + n,
        topic="lg.config",
        partition=0,
        offset=n,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def test_a_replayed_record_is_one_row(audit_store: AuditStore) -> None:
    assert record_change(audit_store, change(1)) is True
    assert record_change(audit_store, change(1)) is False  # the same record, replayed
    assert record_change(audit_store, change(2, "agent-a", sender_host="h\x00st")) is True
    history = config_history(audit_store)
    assert [c.change_id for c in history] == ["lg.config:0:2", "lg.config:0:1"]
    assert history[0].sender_host == "h\\x00st"  # PostgreSQL text holds no NUL
    assert [c.agent_key for c in config_history(audit_store, agent="agent-a")] == ["agent-a"]
    assert len(config_history(audit_store, limit=1)) == 1
    assert latest_change(audit_store) == history[0]


def test_the_file_is_recorded_when_it_changed(audit_store: AuditStore) -> None:
    fleet = FleetConfig({"enabled": True})
    first = file_change(fleet, "/etc/lg.json5", "app", 1)
    assert record_file_change(audit_store, first) is True
    assert record_file_change(audit_store, replace(first, changed_at=2)) is False  # a restart
    edited = file_change(
        FleetConfig({"enabled": True, "warningThreshold": 4}), "/etc/lg.json5", "app", 3
    )
    assert record_file_change(audit_store, edited) is True
    newest = latest_change(audit_store)
    assert newest is not None
    assert newest.version_before == first.version_after
    assert newest.version_after == edited.version_after != first.version_after
    assert json.loads(newest.value or "")["tools"]["loopDetection"]["warningThreshold"] == 4


def test_the_files_version_is_the_config_version_its_decisions_carry(audit_store) -> None:
    """Issue 41: one version for one config, in `config check`, the decisions and `config
    history` (the file's was a hash of its document)."""
    fleet = FleetConfig({"enabled": True}, {"coder": {"historySize": 20}})
    change = file_change(fleet, "/etc/lg.json5", "app", 1)
    assert (
        change.version_after == resolve({"enabled": True}).version == fleet.for_agent("x").version
    )
    assert record_file_change(audit_store, change) is True
    # an agent block alone changes: the global version stays, the change is recorded
    edited = file_change(FleetConfig({"enabled": True}, {"coder": {"historySize": 25}}),
                         "/etc/lg.json5", "app", 2)  # fmt: skip
    assert edited.version_after == change.version_after
    assert record_file_change(audit_store, edited) is True
    assert record_file_change(audit_store, replace(edited, changed_at=3)) is False  # restart
    newest = latest_change(audit_store)
    assert newest is not None and newest.value == edited.value
    assert newest.version_before == newest.version_after == change.version_after


def test_the_recorder_never_waits_and_keeps_a_change_until_stored() -> None:
    stored: list[ConfigChange] = []
    new: list[ConfigChange] = []
    database_up = threading.Event()
    done = threading.Event()

    def write(c: ConfigChange) -> bool:  # as the audit writer: waits out the outage
        database_up.wait()
        stored.append(c)
        done.set()
        return True

    recorder = ConfigChangeRecorder(write, new.append, queue_size=2).start()
    try:
        recorder.submit(change(1))  # taken by the thread, waiting for the database
        for n in range(2, 10):
            recorder.submit(change(n))  # returns at once; beyond the queue's room, dropped
        assert recorder.dropped >= 1
        database_up.set()
        assert done.wait(10)
    finally:
        recorder.stop()
    assert stored[0].change_id == "lg.config:0:1"
    assert new[0] == stored[0]


def test_a_change_the_database_refuses_does_not_hold_up_the_next(caplog) -> None:
    stored: list[str] = []
    second = threading.Event()

    def write(c: ConfigChange) -> bool:
        if c.offset == 1:
            raise ValueError("value too long for type character varying(16)")
        stored.append(c.change_id)
        second.set()
        return True

    recorder = ConfigChangeRecorder(write, retry_seconds=0.01, max_attempts=3).start()
    try:
        with caplog.at_level("WARNING", logger="loopguard.config"):
            recorder.submit(change(1))
            recorder.submit(change(2))
            assert second.wait(10)
    finally:
        recorder.stop()
    assert stored == ["lg.config:0:2"] and recorder.dropped == 1
    assert any("not recorded after 3 tries" in r.getMessage() for r in caplog.records)


def test_a_record_becomes_a_change_with_its_sender_and_versions() -> None:
    headers = [
        (PRINCIPAL_HEADER, b"User:admin"),
        (CLIENT_ID_HEADER, b"loopguard-config"),
        (USER_HEADER, b"ops"),
        (HOST_HEADER, b"bastion"),
        (SOURCE_HEADER, SOURCE_CLI.encode()),
        ("unrelated", b"x"),
    ]
    record = Record("lg.config", 0, 7, 1_700_000_000_123, b"*", b'{"enabled": false}', headers)
    before, after = resolve({"enabled": True}), resolve({"enabled": False})
    c = change_from_record(record, "*", before, after, None, "worker-1")
    assert c.change_id == "lg.config:0:7"
    assert (c.source, c.action, c.disables) == ("cli", "set", True)
    assert (c.principal, c.client_id, c.sender_user, c.sender_host) == (
        "User:admin",
        "loopguard-config",
        "ops",
        "bastion",
    )
    assert (c.version_before, c.version_after) == (before.version, after.version)
    assert c.sender == "User:admin, ops@bastion, client loopguard-config"
    observe = change_from_record(record, "*", before, resolve({"mode": "observe"}), None)
    assert observe.disables
    agent = change_from_record(record._replace(key=b"a"), "a", before, after, None)
    assert not agent.disables  # only the global block turns the fleet off
    bare = change_from_record(record._replace(headers=[]), "*", None, None, ConfigError("bad"))
    assert (bare.source, bare.action, bare.error, bare.disables) == (
        "topic",
        "refused",
        "bad",
        False,
    )
    assert bare.sender == "unknown sender (no loopguard headers)"


def test_the_watcher_logs_a_fleet_wide_switch_off_at_warning(caplog) -> None:
    watcher = ConfigWatcher(["127.0.0.1:1"], "lg.config")
    watcher.resolve = lambda key: resolve(watcher.get("*"))
    seen: list[ConfigChange] = []
    watcher.on_change = seen.append
    headers = [(USER_HEADER, b"mallory"), (HOST_HEADER, b"laptop")]
    record = Record("lg.config", 0, 3, 1, b"*", b'{"enabled": false}', headers)
    with caplog.at_level("INFO", logger="loopguard.config"):
        watcher._on_record(record)  # noqa: SLF001 - the follower's callback, without a broker
    warning = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warning) == 1
    assert '{"enabled":false}' in warning[0].getMessage()
    assert "mallory@laptop" in warning[0].getMessage()
    assert seen[0].disables and seen[0].version_before != seen[0].version_after


def test_the_webhook_notice_is_slack_shaped_and_keyed_by_the_record() -> None:
    c = change(5, value='{"mode": "observe"}', disables=True, sender_user="ops")
    body = config_change_body(c)
    assert "observe only" in body["text"] and "ops@?" in body["text"]
    assert body["blocks"][0]["type"] == "header"
    notice = config_change_notice(c)
    assert notice.decision_id == "config:lg.config:0:5"
    assert json.loads(notice.body) == body


def test_config_history_cli(audit_store: AuditStore, capsys) -> None:
    url = audit_store.url.render_as_string(hide_password=False)
    record_change(
        audit_store, change(1, principal="User:admin", disables=True, value='{"enabled":false}')
    )
    record_change(audit_store, change(2, "agent-a", action="removed", value=None))
    assert main(["config", "history", "--db", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["time", "(UTC)", "key"]
    assert "agent-a" in out[1] and "removed" in out[1]
    assert "User:admin" in out[2] and "guarding off for all" in out[2]
    assert main(["config", "history", "--db", url, "--json", "--agent", "*"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["change_id"] for r in rows] == ["lg.config:0:1"]
    assert rows[0]["principal"] == "User:admin"


def test_config_history_errors_in_one_line(tmp_path, capsys) -> None:
    missing = f"sqlite:///{tmp_path}/none.db"
    assert main(["config", "history", "--db", missing]) != 0
    err = capsys.readouterr().err
    assert "no audit trail" in err and "Traceback" not in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit):
        main(["config", "history", "--limit", "0"])


def test_the_status_page_shows_the_latest_change_escaped() -> None:
    from streams.web.status_page import render_config_card

    c = change(3, disables=True, value='{"enabled":false}', sender_user="<b>ops</b>")
    card = render_config_card(c, now_ms=c.changed_at + 60_000)
    assert 'id="config-change"' in card and "state-bad" in card
    assert "&lt;b&gt;ops&lt;/b&gt;@?" in card and "<b>ops" not in card
    assert "1 min" in card or "60" in card or "ago" in card
    assert "none recorded" in render_config_card(None, 0)
