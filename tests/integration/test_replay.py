"""``loopguard replay`` / ``export`` against a real pipeline: a loop is driven through the tansu
broker and a worker, the audit trail is written (SQLite and PostgreSQL), then the recorded
decisions are re-derived from the events topic and from an export file, with the worker's
config (match) and with another config or a tampered audit trail (divergence)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

import pytest
from db_fixtures import BACKENDS, fresh_pg_database
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from services import ENABLED, Pipeline
from sqlalchemy import text
from test_pipeline import drive_ping_pong, expected_decisions, wait_for_audit

from streams.audit.store import AuditStore
from streams.cli.common import EXIT_DIVERGED, EXIT_ERROR, EXIT_OK, EXIT_USAGE
from streams.cli.main import main
from streams.core.events import Action, Decision, event_to_dict
from streams.core.fleet import fleet_from_document
from streams.gateway.client import GatewayClient, GatewayRun
from streams.wire.avro import decode_decision

pytestmark = pytest.mark.integration

OTHER = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 5}}}


@dataclass
class Recorded:
    pipeline: Pipeline
    client: GatewayClient
    run: GatewayRun
    config_file: str
    expected: list[Decision]

    def export_args(self, *extra: str) -> list[str]:
        return [
            "export",
            "--broker",
            self.pipeline.broker.url,
            "--topic-prefix",
            self.pipeline.prefix,
            *extra,
        ]

    def args(self, *extra: str) -> list[str]:
        return [
            "replay",
            "--broker",
            self.pipeline.broker.url,
            "--topic-prefix",
            self.pipeline.prefix,
            "--db",
            self.pipeline.db_url,
            "--config",
            self.config_file,
            "--progress",
            "0",
            *extra,
        ]


def record_loop(pipeline: Pipeline, client: GatewayClient, agent: str) -> tuple[GatewayRun, list]:
    run = client.start_run(agent)
    assert drive_ping_pong(run, client), "the run was never aborted"
    run.end()
    expected = expected_decisions(run.events)
    rows = wait_for_audit(pipeline, run.run_id, len(expected))
    assert len(rows) == len(expected)
    # The worker's last watermark (for RunEnded) comes after the last decision: wait for it,
    # or a test that checks what replays write to the control topic would see it land.
    client.wait_processed(run.run_id, run.seq, timeout=30)
    return run, expected


@pytest.fixture(scope="module", params=BACKENDS)
def recorded(request, broker, tmp_path_factory):
    """One worker per backend for the module, with one ping-pong loop in the audit trail."""
    workdir = tmp_path_factory.mktemp(f"replay-{request.param}")
    pg = None
    if request.param == "sqlite":
        db_url = f"sqlite:///{workdir / 'audit.db'}"
    else:
        pg = fresh_pg_database()
        db_url = next(pg)
    with AuditStore(db_url) as store:
        store.migrate()
    pipeline = Pipeline(broker, db_url, workdir, config=ENABLED).setup()
    try:
        client = pipeline.start_ready()
        run, expected = record_loop(pipeline, client, "coder")
        yield Recorded(
            pipeline, client, run, str(workdir / f"{pipeline.prefix}-config.json"), expected
        )
    finally:
        pipeline.close()
        if pg is not None:
            pg.close()


def replay(capsys, args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def end_offsets(pipeline: Pipeline, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=pipeline.broker.bootstrap, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def records_since(
    pipeline: Pipeline, topic: str, offsets: dict[int, int], timeout: float = 20.0
) -> list:
    """The records of ``topic`` from ``offsets`` to its end offsets now. Offsets alone cannot
    say whether anything was written: exactly once, a transaction's commit marker takes an
    offset of its own, and a worker may commit one for records written before ``offsets``."""
    consumer = KafkaConsumer(bootstrap_servers=pipeline.broker.bootstrap, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in offsets]
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, offsets[tp.partition])
        records: list = []
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"{topic} not read up to {ends}"
            for batch in consumer.poll(timeout_ms=500).values():
                records += batch
        return records
    finally:
        consumer.close()


def read_topic(pipeline: Pipeline, topic: str, count: int, timeout: float = 20.0) -> list:
    consumer = KafkaConsumer(bootstrap_servers=pipeline.broker.bootstrap, group_id=None)
    try:
        deadline = time.monotonic() + timeout
        while not consumer.partitions_for_topic(topic) and time.monotonic() < deadline:
            consumer.topics()
            time.sleep(0.2)
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        values = []
        while len(values) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        return values
    finally:
        consumer.close()


def comparable(decision: Decision) -> dict:
    data = decision.to_dict()
    data.pop("config_version")
    return data


# ------------------------------------------------------------------------------------ (a)


def test_replay_from_topic_matches_the_audit_trail(recorded: Recorded, capsys) -> None:
    run = recorded.run
    control = recorded.pipeline.settings.topics.control
    control_before = end_offsets(recorded.pipeline, control)

    code, out, err = replay(capsys, recorded.args("--run", run.run_id, "--progress", "10"))
    assert code == EXIT_OK, out + err
    assert f"run {run.run_id}" in out and "MATCH" in out
    assert "summary: 1 match, 0 diverged" in out
    assert "note:" not in out  # same config as the worker: same config_version
    assert "replay: 10 messages read" in err  # progress on stderr

    code, out, _ = replay(capsys, recorded.args("--run", run.run_id, "--json"))
    assert code == EXIT_OK
    report = json.loads(out)
    (only,) = report["runs"]
    assert only["status"] == "match" and only["run_id"] == run.run_id
    assert only["replayed"] == only["recorded"] == len(recorded.expected)
    assert only["events"] == len(run.events) and only["first_seq"] == 1
    assert only["last_seq"] == len(run.events)
    assert only["config_version_differs"] is False
    assert report["exit_code"] == EXIT_OK

    # Nothing was written to the control topic by replays without --publish-to.
    assert records_since(recorded.pipeline, control, control_before) == []


def test_replay_of_the_whole_topic_counts_undecodable_messages(recorded: Recorded, capsys):
    topic = recorded.pipeline.settings.topics.events
    producer = KafkaProducer(bootstrap_servers=recorded.pipeline.broker.bootstrap)
    producer.send(topic, key=b"junk", value=b"\x00\x01not avro at all").get(timeout=10)
    producer.close()
    code, out, _ = replay(capsys, recorded.args("--json"))
    assert code == EXIT_OK, out
    report = json.loads(out)
    statuses = {r["run_id"]: r["status"] for r in report["runs"]}
    assert statuses[recorded.run.run_id] == "match"
    assert set(statuses.values()) == {"match"}  # the canary run matches too
    assert report["undecodable"] >= 1
    assert any("bad marker" in s for s in report["undecodable_samples"])

    code, out, _ = replay(capsys, recorded.args("--run", recorded.run.run_id))
    assert code == EXIT_OK
    assert "undecodable message(s) skipped" in out


def test_replay_selection_by_time_and_offset(recorded: Recorded, capsys) -> None:
    run = recorded.run
    first, later = run.events[0].envelope.event_time, run.events[5].envelope.event_time
    code, out, _ = replay(capsys, recorded.args("--run", run.run_id, "--since", str(first)))
    assert code == EXIT_OK, out
    assert "MATCH" in out

    # Cut after the start of the run: it cannot be re-derived, and --run asked for it.
    if later > first:
        code, out, _ = replay(capsys, recorded.args("--run", run.run_id, "--since", str(later)))
        assert code == EXIT_ERROR, out
        assert "INCOMPLETE" in out and "not compared" in out

    # Up to a time in the middle: decisions after the last replayed event are not compared.
    middle = recorded.expected[len(recorded.expected) // 2]
    until = middle.event_time
    code, out, _ = replay(capsys, recorded.args("--run", run.run_id, "--until", str(until)))
    assert code == EXIT_OK, out
    assert "MATCH" in out and "not compared" in out

    # Starting past the end of every partition: no events, the asked-for run is not verified.
    ends = end_offsets(recorded.pipeline, recorded.pipeline.settings.topics.events)
    offsets = [f"{p}:{o}" for p, o in ends.items()]
    args = recorded.args("--run", run.run_id)
    for spec in offsets:
        args += ["--from-offset", spec]
    code, out, _ = replay(capsys, args)
    assert code == EXIT_ERROR, out
    assert "WITHOUT EVENTS" in out.upper() or "NOT FOUND" in out

    code, _, err = replay(capsys, recorded.args("--since", "10", "--until", "5"))
    assert code == EXIT_USAGE and "--since" in err


def test_replay_publishes_only_when_asked(recorded: Recorded, capsys) -> None:
    target = f"{recorded.pipeline.prefix}.replayed"
    code, out, _ = replay(
        capsys, recorded.args("--run", recorded.run.run_id, "--publish-to", target)
    )
    assert code == EXIT_OK, out
    assert f"published {len(recorded.expected)} replayed decision(s) to {target}" in out
    values = read_topic(recorded.pipeline, target, len(recorded.expected))
    published = [decode_decision(v) for v in values]
    assert [comparable(d) for d in published] == [comparable(d) for d in recorded.expected]


# ------------------------------------------------------------------------------------ (b)


def test_export_then_replay_from_file_matches(recorded: Recorded, capsys, tmp_path: Path):
    run = recorded.run
    path = tmp_path / "export.jsonl"
    code = main(recorded.export_args("--run", run.run_id, "--progress", "0", "-o", str(path)))
    out, err = capsys.readouterr()
    assert code == EXIT_OK, out + err
    assert f"exported {len(run.events)} events of 1 run(s)" in out
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [event_to_dict(e) for e in run.events]

    code = main(recorded.export_args("--run", run.run_id, "--out", "-"))
    out, err = capsys.readouterr()
    assert code == EXIT_OK
    assert [json.loads(line) for line in out.splitlines()] == lines
    assert "exported" in err  # the summary stays out of the exported data

    args = [
        "replay",
        "--from-file",
        str(path),
        "--db",
        recorded.pipeline.db_url,
        "--config",
        recorded.config_file,
    ]
    code, out, _ = replay(capsys, args)
    assert code == EXIT_OK, out
    assert f"from file {path}" in out and "summary: 1 match, 0 diverged" in out


# ------------------------------------------------------------------------------------ (c)


def test_replay_with_another_config_diverges(recorded: Recorded, capsys, tmp_path: Path):
    run = recorded.run
    other = tmp_path / "other.json"
    other.write_text(json.dumps(OTHER))
    replayed = sorted(expected_decisions(run.events, OTHER), key=lambda d: (d.seq, d.detector))
    stored = sorted(recorded.expected, key=lambda d: (d.seq, d.detector))
    first = next(
        (a or b).seq
        for a, b in zip_longest(replayed, stored)
        if a is None or b is None or comparable(a) != comparable(b)
    )
    args = [*recorded.args("--run", run.run_id)]
    args[args.index("--config") + 1] = str(other)
    code, out, _ = replay(capsys, args)
    assert code == EXIT_DIVERGED, out
    assert "DIVERGED" in out
    assert f"first divergence at seq {first}" in out
    event_line = next(line for line in out.splitlines() if f"event at seq {first}:" in line)
    event = json.loads(event_line.split(f"event at seq {first}: ", 1)[1])
    assert event == event_to_dict(run.events[first - 1])
    old_version = fleet_from_document(ENABLED).for_agent("coder").version
    new_version = fleet_from_document(OTHER).for_agent("coder").version
    assert "note: the recorded decisions were made under config version" in out
    assert old_version in out and new_version in out

    code, out, _ = replay(capsys, [*args, "--json"])
    assert code == EXIT_DIVERGED
    (report,) = json.loads(out)["runs"]
    assert report["divergence"]["seq"] == first
    assert report["divergence"]["event"]["seq"] == first
    assert report["config_version_differs"] is True
    assert report["recorded_config_versions"] == [old_version]
    assert report["replay_config_version"] == new_version


# ------------------------------------------------------------------------------------ (d)


def test_tampered_audit_trail_is_reported(recorded: Recorded, capsys) -> None:
    pipeline, client = recorded.pipeline, recorded.client
    run, expected = record_loop(pipeline, client, "tamper-target")
    args = recorded.args("--run", run.run_id)
    assert replay(capsys, args)[0] == EXIT_OK

    warn = next(d for d in expected if d.action is Action.WARN)
    block = next(d for d in expected if d.action is Action.BLOCK)
    with AuditStore(pipeline.db_url) as store, store.engine.begin() as conn:
        conn.execute(
            text("UPDATE decisions SET count = 999 WHERE decision_id = :id"),
            {"id": warn.decision_id},
        )
    code, out, _ = replay(capsys, args)
    assert code == EXIT_DIVERGED, out
    assert f"first divergence at seq {warn.seq}: the decisions differ" in out
    assert f"count: expected {warn.count}, recorded 999" in out

    with AuditStore(pipeline.db_url) as store, store.engine.begin() as conn:
        conn.execute(
            text("UPDATE decisions SET count = :n WHERE decision_id = :id"),
            {"n": warn.count, "id": warn.decision_id},
        )
        conn.execute(
            text("DELETE FROM decisions WHERE decision_id = :id"), {"id": block.decision_id}
        )
    code, out, _ = replay(capsys, args)
    assert code == EXIT_DIVERGED, out
    assert (
        f"first divergence at seq {block.seq}: replay decides block/{block.detector}, "
        "the audit trail has no such decision"
    ) in out
    assert f"decisions: replayed {len(expected)}, recorded {len(expected) - 1}" in out
    event_line = next(line for line in out.splitlines() if f"event at seq {block.seq}:" in line)
    assert json.loads(event_line.split(": ", 1)[1]) == event_to_dict(run.events[block.seq - 1])


# ------------------------------------------------------------------------------------ (e)

GOOD = {
    "kind": "run_started",
    "run_id": "r1",
    "agent_id": "a",
    "gateway_id": "g",
    "seq": 1,
    "event_time": 1,
}
BAD_LINES = {
    "truncated": (b'{"kind": "tool_call", "run_id": "r1", "seq": 2', "not valid JSON"),
    "not an object": (b"[1, 2]", "expected a JSON object, got list"),
    "unknown kind": (b'{"kind": "teleport", "run_id": "r1", "seq": 2}', "unknown event kind"),
    "missing seq": (b'{"kind": "tool_call", "run_id": "r1", "tool_name": "x"}', "'seq'"),
    "seq not a number": (
        b'{"kind": "tool_call", "run_id": "r1", "seq": "two", "tool_name": "x"}',
        "AgentEvent.seq must be an int",
    ),
    "tool name not a string": (
        b'{"kind": "tool_call", "run_id": "r1", "seq": 2, "tool_name": 5}',
        "ToolCall.tool_name must be a str",
    ),
    "empty run id": (b'{"kind": "run_ended", "run_id": "", "seq": 2}', "empty run_id"),
    "not utf-8": (b'{"kind": "run_ended", "run_id": "r\xff", "seq": 2}', "not UTF-8"),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_bad_export_file_line_is_named(case: str, capsys, tmp_path: Path) -> None:
    line, why = BAD_LINES[case]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + line + b"\n")
    db_url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(db_url) as store:
        store.migrate()
    code, out, err = replay(capsys, ["replay", "--from-file", str(path), "--db", db_url])
    assert code == EXIT_USAGE, out + err
    assert f"{path}:2: " in err and why in err, err
    assert err.count("\n") == 1  # one line, no traceback


def test_missing_export_file_and_bad_config_are_usage_errors(capsys, tmp_path: Path) -> None:
    code, _, err = replay(capsys, ["replay", "--from-file", str(tmp_path / "nope.jsonl")])
    assert code == EXIT_USAGE and "nope.jsonl: not a readable file" in err
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"tools": {"loopDetection": {"warningThreshold": "3"}}}))
    path = tmp_path / "ok.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    code, _, err = replay(capsys, ["replay", "--from-file", str(path), "--config", str(config)])
    assert code == EXIT_USAGE and "tools.loopDetection.warningThreshold" in err
    code, _, err = replay(
        capsys, ["replay", "--from-file", str(path), "--from-offset", "3", "--db", "sqlite://"]
    )
    assert code == EXIT_USAGE and "--from-offset" in err
