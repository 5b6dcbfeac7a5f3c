"""Replay and backtest find loop incidents (issue 28) from an events file, as the worker does:
the same signals in event-time order through the same pure steps."""

from __future__ import annotations

import json
from pathlib import Path

from streams.cli.main import main
from streams.core.events import AgentEvent, Envelope, RunEnded, RunStarted, ToolCall, ToolResult
from streams.core.incident_config import IncidentConfig
from streams.core.incidents import OPEN, IncidentBook, failure_signal, incident_id
from streams.replay.event_file import write_events_atomically
from streams.replay.incidents import incidents_of

CONFIG = IncidentConfig(enabled=True, window_seconds=60, min_runs=4, min_agents=2)
T0 = 1_700_000_040_000


def failing_runs(runs: int = 4, at: int = T0) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for n in range(runs):
        run, agent = f"run-{n}", f"agent-{n % 2}"
        error = f"quota exceeded for key sk_{n}abc at 12:00:0{n}"
        body: list[AgentEvent] = [RunStarted(Envelope(run, agent, "gw", 1, at + n))]
        for call in range(3):
            seq = 2 + 2 * call
            body.append(ToolCall(Envelope(run, agent, "gw", seq, at + n + seq), "llm", "{}"))
            env = Envelope(run, agent, "gw", seq + 1, at + n + seq + 1)
            body.append(ToolResult(env, "llm", "{}", None, error))
        body.append(RunEnded(Envelope(run, agent, "gw", 8, at + n + 8)))
        events += body
    return events


def test_replay_orders_signals_by_event_time_whatever_the_read_order() -> None:
    events = failing_runs()
    forward = incidents_of(CONFIG, events, [])
    backward = incidents_of(CONFIG, list(reversed(events)), [])
    assert forward == backward and len(forward) == 1
    (incident,) = forward
    assert incident.status == OPEN and incident.runs == ("run-0", "run-1", "run-2", "run-3")
    assert incident.incident_id == incident_id(incident.signature, T0)
    book = IncidentBook(CONFIG)
    for event in events:
        if isinstance(event, ToolResult) and (signal := failure_signal(event)):
            book.observe(signal)
    assert book.incidents() == forward  # what the worker's steps make of them in order
    (closed,) = incidents_of(CONFIG, events, [], until=T0 + 120_000)
    assert closed.closed_at == T0 + 120_000


def test_replay_and_backtest_report_the_incidents(tmp_path: Path, capsys) -> None:
    events = tmp_path / "events.jsonl"
    write_events_atomically(events, failing_runs())
    config = tmp_path / "config.json"
    block = {"enabled": True, "incidents": {"enabled": True, "minRuns": 4, "minAgents": 2}}
    config.write_text(json.dumps({"tools": {"loopDetection": block}}))
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    assert main(["migrate", "--db", db]) == 0
    capsys.readouterr()
    main(["replay", "--from-file", str(events), "--db", db, "--config", str(config), "--json"])
    replayed = json.loads(capsys.readouterr().out)["incidents"]
    args = ["--from-file", str(events), "--config", str(config), "--baseline-config"]
    main(["backtest", *args, str(config), "--json"])
    backtested = json.loads(capsys.readouterr().out)["incidents"]
    assert len(replayed) == 1 and replayed == backtested
    assert (
        replayed[0]["tool"] == "llm"
        and replayed[0]["detail"] == "quota exceeded for key <id> at <ts>"
    )
    off = tmp_path / "off.json"
    off.write_text(json.dumps({"tools": {"loopDetection": {"enabled": True}}}))
    main(
        [
            "backtest",
            "--from-file",
            str(events),
            "--config",
            str(off),
            "--baseline-config",
            str(off),
            "--json",
        ]
    )
    assert json.loads(capsys.readouterr().out)["incidents"] == []
