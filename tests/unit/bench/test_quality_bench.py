"""The quality benchmark on a corpus of three runs written here: each rule set's row, and the
table and JSON the command prints. The loopguard rows use compat mode (the reference's
verdicts, which stay put while loopguard's own rules move)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.quality.command import main
from bench.quality.corpus import read_corpus, read_labels
from bench.quality.peer_rules import PEERS
from bench.quality.scores import RowScore, Stop, score
from bench.quality.verdicts import loopguard_verdicts, peer_verdicts
from streams.core.events import Envelope, RunEnded, RunStarted, ToolCall, ToolResult
from streams.core.fleet import fleet_from_document
from streams.replay.event_file import write_event_lines

COMPAT = {"enabled": True, "compat": "openclaw"}


def shell_result(text: str, exit_code: int) -> str:
    details = {"status": "completed", "exitCode": exit_code, "aggregated": text}
    return json.dumps({"content": [{"type": "text", "text": text}], "details": details})


def run_events(run_id: str, calls: list[tuple[str, str]], usage: bool) -> list:
    """A run of exec calls (command, result JSON): 100 + 10 tokens per call where ``usage``,
    and 50 + 5 on the final turn."""
    seq = iter(range(1, 1000))

    def env() -> Envelope:
        n = next(seq)
        return Envelope(run_id, "coder", "import", n, 1_000 + n)

    events: list = [RunStarted(env())]
    for i, (command, result) in enumerate(calls, 1):
        args = json.dumps({"command": command})
        tokens = {"input_tokens": 100, "output_tokens": 10} if usage else {}
        events.append(ToolCall(env(), "exec", args, f"c{i}", **tokens))
        events.append(ToolResult(env(), "exec", args, result, None, f"c{i}"))
    final = {"input_tokens": 50, "output_tokens": 5} if usage else {}
    events.append(RunEnded(env(), **final))
    return events


FAIL = shell_result("FAIL", 1)
# unresolved, unlabelled: the same failing call 25 times
LOOP = [("python t.py", FAIL)] * 25
# unresolved, labelled stuck from call 3: a different failure each time, same exit code
STUCK = [("ls", shell_result("a.py", 0))] + [
    ("python t.py", shell_result(f"FAIL {i}", 1)) for i in range(6)
]
# resolved, labelled not stuck: waits on a status four times, then tests
OK = [("git status", shell_result("clean", 0))] * 4 + [("pytest", shell_result("ok", 0))]


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, Path]:
    events = (
        run_events("loop-1", LOOP, usage=True)
        + run_events("stuck-1", STUCK, usage=False)
        + run_events("ok-1", OK, usage=True)
    )
    path = tmp_path / "runs.jsonl"
    with path.open("w", encoding="utf-8") as out:
        write_event_lines(events, out)
    outcomes = {"loop-1": "unresolved", "stuck-1": "unresolved", "ok-1": "resolved"}
    sidecar = tmp_path / "runs.jsonl.outcomes.jsonl"
    sidecar.write_text(
        "".join(
            json.dumps({"run_id": r, "format": "test", "source": "here", "outcome": o}) + "\n"
            for r, o in outcomes.items()
        )
    )
    labels = tmp_path / "labels.json"
    labels.write_text(
        json.dumps({"run_id": "stuck-1", "stuck": True, "from_call": 3, "why": "same test"})
        + "\n"
        + json.dumps({"run_id": "ok-1", "stuck": False, "from_call": None, "why": "polls"})
        + "\n"
    )
    return path, labels


def estimated(calls: list[tuple[str, str]], first: int) -> int:
    """The estimate for calls ``first``.. of a run without usage: characters / 4."""
    chars = sum(len(json.dumps({"command": c})) + len(r) for c, r in calls[first - 1 :])
    return chars // 4


def peer_rows(corpus: tuple[Path, Path]) -> dict[str, RowScore]:
    _, runs = read_corpus([corpus[0]])
    labels = read_labels(corpus[1])
    return {
        name: score(name, runs, peer_verdicts(runs, make), labels) for name, make in PEERS.items()
    }


def test_openhands_row(corpus: tuple[Path, Path]) -> None:
    row = peer_rows(corpus)["openhands"]
    assert (row.runs, row.calls) == (3, 37)
    assert row.resolved == {"abort": 1}
    assert row.unresolved == {"abort": 2}
    assert (row.stuck, row.stuck_stopped, row.delays) == (1, 1, [3])  # stops call 6
    assert row.false_stops == [Stop("ok-1", "repeating_action_observation", 5)]
    assert row.resolved_stops == row.false_stops
    assert row.calls_saved == 21 + 2  # loop-1 from call 5, stuck-1 from call 6
    assert row.tokens_saved == 21 * 110 + 55
    assert row.tokens_estimated == estimated(STUCK, 6)


def test_roo_gemini_and_cline_rows(corpus: tuple[Path, Path]) -> None:
    rows = peer_rows(corpus)
    roo, gemini, cline = rows["roo-code"], rows["gemini-cli"], rows["cline"]
    assert (roo.resolved, roo.unresolved, roo.delays) == ({"abort": 1}, {"abort": 2}, [2])
    assert roo.false_stops == [Stop("ok-1", "tool_repetition_limit", 4)]
    assert (roo.calls_saved, roo.tokens_saved) == (22 + 3, 22 * 110 + 55)
    # Gemini: a block at the 5th identical call, the turn ended at the 6th
    assert (gemini.resolved, gemini.unresolved, gemini.delays) == ({}, {"abort": 2}, [3])
    assert (gemini.false_stops, gemini.calls_saved) == ([], 21 + 2)
    # Cline: ok-1 warned at its 3rd status, the loops stopped after their 5th identical call
    assert (cline.resolved, cline.unresolved, cline.delays) == ({"warn": 1}, {"abort": 2}, [4])
    assert (cline.false_stops, cline.calls_saved) == ([], 20 + 1)
    assert cline.tokens_estimated == estimated(STUCK, 7)


def test_loopguard_rows_count_enforced_stops_only(corpus: tuple[Path, Path]) -> None:
    events, runs = read_corpus([corpus[0]])
    labels = read_labels(corpus[1])
    fleet = fleet_from_document({"tools": {"loopDetection": COMPAT}})
    row = score("compat", runs, loopguard_verdicts(events, runs, fleet), labels)
    assert (row.resolved, row.unresolved) == ({}, {"block": 1})  # loop-1, blocked from call 21
    assert (row.stuck_stopped, row.false_stops) == (0, [])
    assert (row.calls_saved, row.tokens_saved) == (5, 5 * 110 + 55)
    assert row.first_stops == {"generic_repeat": 1}
    assert row.stops == [Stop("loop-1", "generic_repeat", 21)]
    observe = fleet_from_document({"tools": {"loopDetection": {**COMPAT, "mode": "observe"}}})
    row = score("observe", runs, loopguard_verdicts(events, runs, observe), labels)
    assert (row.unresolved, row.calls_saved, row.stops) == ({"warn": 1}, 0, [])


def test_the_command_prints_one_row_per_rule_set(
    corpus: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "compat.json"
    config.write_text(json.dumps({"tools": {"loopDetection": COMPAT}}))
    path, labels = corpus
    assert main([str(path.parent), "--labels", str(labels), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "3 runs (1 resolved, 2 unresolved, 0 unknown), 37 tool calls" in out
    assert "labels: 1 stuck, 1 not stuck, 1 unlabelled" in out
    rows = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", x) for x in out.splitlines())}
    # resolved warned/blocked/aborted, unresolved blocked/aborted, stuck stopped, delay,
    # not stuck stopped, calls and tokens saved
    assert rows["loopguard compat.json"] == ["0", "0", "0", "1", "0", "0/1", "-", "0/1", "5", "605"]
    tokens = f"2.4k + {estimated(STUCK, 6)} est."
    assert rows["OpenHands StuckDetector"] == [
        *("0", "0", "1", "0", "2", "1/1", "+3 / +3", "1/1", "23", tokens)
    ]
    assert "loopguard compat openclaw" in rows
    assert "labelled not stuck, stopped: ok-1 (repeating_action_observation, call 5)" in out
    assert "loopguard compat.json: generic_repeat 1 (0 / 0)" in out


def test_json_and_unlabelled_corpus(corpus: tuple[Path, Path], capsys) -> None:
    assert main([str(corpus[0]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    names = [row["rule_set"] for row in report["rows"]]
    assert names[:2] == ["loopguard {enabled: true}", "loopguard compat openclaw"]
    assert len(names) == 2 + len(PEERS)
    openhands = report["rows"][2]
    assert (openhands["stuck_labelled"], openhands["false_stops"]) == (0, [])
    assert openhands["calls_saved"] == 21 + 2  # both unresolved, neither labelled


def test_bad_input_is_exit_2(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no event files" in capsys.readouterr().err
