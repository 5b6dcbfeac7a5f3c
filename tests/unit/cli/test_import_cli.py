"""``loopguard import`` through ``main``: a directory of trajectories with a bad file among them
(skipped with a warning, counted), labels from a results file, the event and outcomes files
(byte-identical on a second run, read by ``backtest --from-file``), ``--json``, and one-line
errors with exit code 2 for bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from importer_helpers import write_json

from streams.cli.common import EXIT_OK, EXIT_USAGE
from streams.cli.main import main
from streams.replay.event_file import parse_event_line


def completion_log(command: str, exit_code: int, calls: int) -> dict[str, Any]:
    """A small OpenHands completion log: the same command ``calls`` times, then finish."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix it."}]
    for n in range(calls):
        arguments = json.dumps({"command": command})
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": f"t{n}", "function": {"name": "execute_bash", "arguments": arguments}}
                ],
            }
        )
        output = f"same output\n[Command finished with exit code {exit_code}]"
        messages.append({"role": "tool", "tool_call_id": f"t{n}", "content": output})
    finish = {"id": "end", "function": {"name": "finish", "arguments": "{}"}}
    response = {"choices": [{"message": {"role": "assistant", "tool_calls": [finish]}}]}
    return {"fncall_messages": messages, "fncall_response": response}


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Path]:
    trajs = tmp_path / "corpus" / "trajs"
    write_json(trajs / "demo__b-2.json", completion_log("make test", 2, 3))
    write_json(trajs / "nested" / "demo__a-1.json", completion_log("ls", 0, 1))
    (trajs / "notes.json").write_text('{"not": "a trajectory"}')
    (trajs / "readme.txt").write_text("not searched: no .json")
    results = write_json(
        tmp_path / "corpus" / "results.json",
        {"resolved": ["demo__a-1"], "completed_ids": ["demo__a-1", "demo__b-2"]},
    )
    return {"trajs": trajs, "results": results, "out": tmp_path / "events.jsonl"}


def run_import(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["import", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_a_directory_with_a_bad_file(corpus: dict[str, Path], capsys) -> None:
    args = ["--format", "openhands", str(corpus["trajs"]), "-o", str(corpus["out"])]
    code, out, err = run_import(capsys, *args, "--results", str(corpus["results"]))
    assert code == EXIT_OK, err
    assert out.splitlines()[-1] == (
        "imported 2 runs (1 resolved, 1 unresolved, 0 unknown), 6 calls, 1 skipped -> "
        f"{corpus['out']} (outcomes: {corpus['out']}.outcomes.jsonl)"
    )
    assert err.splitlines() == [
        f"loopguard import: skipped {corpus['trajs'] / 'notes.json'}: not an OpenHands "
        "completion log (no fncall_messages) nor an event stream (a list of events, or an "
        "object with a history)"
    ]
    lines = corpus["out"].read_text().splitlines()
    events = [parse_event_line(line) for line in lines]
    assert [e.envelope.run_id for e in events] == ["demo__a-1"] * 5 + ["demo__b-2"] * 9
    outcomes = Path(f"{corpus['out']}.outcomes.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in outcomes] == [
        {
            "run_id": "demo__a-1",
            "format": "openhands",
            "source": "nested/demo__a-1.json",
            "outcome": "resolved",
            "calls": 2,
            "tokens": None,
        },
        {
            "run_id": "demo__b-2",
            "format": "openhands",
            "source": "demo__b-2.json",
            "outcome": "unresolved",
            "calls": 4,
            "tokens": None,
        },
    ]
    first = corpus["out"].read_bytes()
    assert run_import(capsys, *args, "--results", str(corpus["results"]))[0] == EXIT_OK
    assert corpus["out"].read_bytes() == first, "the same input gives the same file"


def test_json_summary_and_labels_without_results(corpus: dict[str, Path], capsys) -> None:
    one = corpus["trajs"] / "demo__b-2.json"
    code, out, err = run_import(
        capsys, "--format", "openhands", str(one), "-o", str(corpus["out"]), "--json", "--progress"
    )
    assert code == EXIT_OK
    assert err == "imported 1/1 trajectories\n"  # --progress: on stderr, though no terminal
    assert len(out.splitlines()) == 1
    assert json.loads(out) == {
        "format": "openhands",
        "runs": 1,
        "calls": 4,
        "skipped": 0,
        "outcomes": {"resolved": 0, "unresolved": 0, "unknown": 1},
        "out": str(corpus["out"]),
        "outcomes_file": f"{corpus['out']}.outcomes.jsonl",
    }
    record = json.loads(Path(f"{corpus['out']}.outcomes.jsonl").read_text())
    assert record["source"] == "demo__b-2.json" and record["outcome"] == "unknown"


def test_backtest_reads_the_file(corpus: dict[str, Path], tmp_path: Path, capsys) -> None:
    args = ["--format", "openhands", str(corpus["trajs"]), "-o", str(corpus["out"])]
    assert run_import(capsys, *args)[0] == EXIT_OK
    config = write_json(tmp_path / "on.json", {"tools": {"loopDetection": {"enabled": True}}})
    code = main(
        [
            "backtest",
            "--config",
            str(config),
            "--baseline-config",
            str(config),
            "--from-file",
            str(corpus["out"]),
            "--json",
            "--progress",
            "0",
        ]
    )
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    assert json.loads(out)["runs_compared"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["MISSING"], "MISSING: no such file or directory"),
        (["EMPTY"], "EMPTY: no openhands trajectory files (*.json, *.jsonl) under it"),
        (["BAD"], "no openhands trajectories imported (1 skipped)"),
        (["TRAJS", "--results", "MISSING"], "--results MISSING: no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    corpus: dict[str, Path], tmp_path: Path, capsys, args: list[str], message: str
) -> None:
    (tmp_path / "empty").mkdir()
    names = {
        "MISSING": str(tmp_path / "missing"),
        "EMPTY": str(tmp_path / "empty"),
        "BAD": str(corpus["trajs"] / "notes.json"),
        "TRAJS": str(corpus["trajs"]),
    }
    given = [names.get(arg, arg) for arg in args]
    code, out, err = run_import(capsys, "--format", "openhands", *given, "-o", str(corpus["out"]))
    assert code == EXIT_USAGE
    expected = message
    for name, path in names.items():
        expected = expected.replace(name, path)
    assert err.splitlines()[-1] == f"loopguard import: {expected}"
    assert out == "" and not corpus["out"].exists()
