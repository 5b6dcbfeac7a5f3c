"""Importing a directory: the format's files found recursively (and only those), bad files and
repeated run ids skipped with their reason, progress per file, runs in run-id order, outcome
records per run."""

from __future__ import annotations

from pathlib import Path

from importer_helpers import write_json

from streams.importers.batch import Skipped, import_files, trajectory_files
from streams.importers.formats import FORMATS

MINI = FORMATS["mini-swe-agent"]


def mini_run(command: str) -> dict:
    return {
        "messages": [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": f"```bash\n{command}\n```"},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\nok\n</output>"},
        ]
    }


def test_a_directory_of_trajectories(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    write_json(root / "b" / "demo__z-9" / "demo__z-9.traj.json", mini_run("ls"))
    write_json(root / "a" / "demo__a-1.traj.json", mini_run("pwd"))
    write_json(root / "c" / "demo__a-1.traj.json", mini_run("pwd"))  # the same run again
    (root / "broken.traj.json").write_text("{")
    write_json(root / "preds.json", {"demo__a-1": {}})  # not a .traj.json: not read
    write_json(root / "x.traj", {"trajectory": []})  # SWE-agent's ending: not read either
    files = trajectory_files(MINI, root)
    assert [source for _, source in files] == [
        "a/demo__a-1.traj.json",
        "b/demo__z-9/demo__z-9.traj.json",
        "broken.traj.json",
        "c/demo__a-1.traj.json",
    ]
    skipped: list[Skipped] = []
    progress: list[tuple[int, int]] = []
    report = import_files(
        MINI, files, on_skip=skipped.append, on_progress=lambda *p: progress.append(p)
    )
    assert [run.run_id for run in report.runs] == ["demo__a-1", "demo__z-9"]
    assert [run.source for run in report.runs] == [
        "a/demo__a-1.traj.json",
        "b/demo__z-9/demo__z-9.traj.json",
    ]
    assert report.calls == 2
    assert (
        skipped
        == report.skipped
        == [
            Skipped(
                str(root / "broken.traj.json"),
                "not valid JSON (Expecting property name enclosed in double quotes at line 1)",
            ),
            Skipped(
                str(root / "c" / "demo__a-1.traj.json"),
                "run demo__a-1 is also in a/demo__a-1.traj.json",
            ),
        ]
    )
    assert progress == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert report.outcome_records({"demo__z-9": "resolved"}) == [
        {
            "run_id": "demo__a-1",
            "format": "mini-swe-agent",
            "source": "a/demo__a-1.traj.json",
            "outcome": "unknown",
            "calls": 1,
            "tokens": None,
        },
        {
            "run_id": "demo__z-9",
            "format": "mini-swe-agent",
            "source": "b/demo__z-9/demo__z-9.traj.json",
            "outcome": "resolved",
            "calls": 1,
            "tokens": None,
        },
    ]
    assert [e.envelope.seq for e in report.events()] == [1, 2, 3, 4, 1, 2, 3, 4]


def test_a_file_given_is_read_whatever_its_name(tmp_path: Path) -> None:
    path = write_json(tmp_path / "session.json", mini_run("ls"))
    assert trajectory_files(MINI, path) == [(path, "session.json")]
    [run] = import_files(MINI, trajectory_files(MINI, path)).runs
    assert run.run_id == "session"
