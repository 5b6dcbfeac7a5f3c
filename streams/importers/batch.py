"""Importing many trajectories at once: the files of a format under the paths given, each read
into runs, bad files skipped and counted (one reason each), runs in run-id order, and one
outcome record per run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from streams.core.events import AgentEvent
from streams.importers.formats import TrajectoryFormat
from streams.importers.labels import outcome_of
from streams.importers.run_events import run_events, run_tokens
from streams.importers.runs import ImportedRun, TrajectoryError


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file that was not imported, and why."""

    path: str
    reason: str


@dataclass(slots=True)
class ImportReport:
    """What an import read: runs in run-id order, and the files it skipped."""

    trajectory_format: TrajectoryFormat
    runs: list[ImportedRun] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(len(run.calls) for run in self.runs)

    def events(self) -> Iterator[AgentEvent]:
        for run in self.runs:
            yield from run_events(run, self.trajectory_format.name)

    def outcome_records(self, results: dict[str, str] | None) -> list[dict[str, Any]]:
        """One record per run, in run-id order (the outcomes file)."""
        return [
            {
                "run_id": run.run_id,
                "format": self.trajectory_format.name,
                "source": run.source,
                "outcome": outcome_of(run.run_id, results, run.own_outcome),
                "calls": len(run.calls),
                "tokens": run_tokens(run),
            }
            for run in self.runs
        ]


def trajectory_files(fmt: TrajectoryFormat, argument: Path) -> list[tuple[Path, str]]:
    """(file, source) for a path given: a file itself (its source is its name), or every file
    of the format under a directory, recursively (sources relative to it), sorted."""
    if argument.is_file():
        return [(argument, argument.name)]
    found = [
        path for path in argument.rglob("*") if path.name.endswith(fmt.suffixes) and path.is_file()
    ]
    return [(path, path.relative_to(argument).as_posix()) for path in sorted(found)]


def import_files(
    fmt: TrajectoryFormat,
    files: list[tuple[Path, str]],
    on_skip: Callable[[Skipped], None] = lambda skipped: None,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> ImportReport:
    """Read every file; a file that is no valid trajectory of the format, or a run whose id an
    earlier file already gave, is skipped (``on_skip``) and the import goes on."""
    report = ImportReport(fmt)
    by_id: dict[str, ImportedRun] = {}
    for done, (path, source) in enumerate(files, start=1):
        try:
            runs = fmt.read(path)
        except TrajectoryError as exc:
            report.skipped.append(Skipped(str(path), str(exc)))
            on_skip(report.skipped[-1])
            runs = []
        except OSError as exc:
            report.skipped.append(Skipped(str(path), f"cannot read ({exc.strerror or exc})"))
            on_skip(report.skipped[-1])
            runs = []
        for run in runs:
            if run.run_id in by_id:
                other = by_id[run.run_id].source
                report.skipped.append(Skipped(str(path), f"run {run.run_id} is also in {other}"))
                on_skip(report.skipped[-1])
                continue
            by_id[run.run_id] = replace(run, source=source)
        on_progress(done, len(files))
    report.runs = [by_id[run_id] for run_id in sorted(by_id)]
    return report
