"""``loopguard import``: public agent trajectories as a loopguard event file (what ``replay
--from-file`` and ``backtest --from-file`` read), one run per trajectory, with an outcomes file
beside it that keeps each run's label (resolved, unresolved, unknown).

The work is in :mod:`streams.importers`; this module reads the flags, reports progress and
skipped files on stderr, writes both files atomically and prints the summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from streams.cli.common import EXIT_OK, EXIT_USAGE, InputError
from streams.importers.batch import ImportReport, Skipped, import_files, trajectory_files
from streams.importers.formats import FORMATS
from streams.importers.labels import LabelError, load_results
from streams.importers.runs import RESOLVED, UNKNOWN, UNRESOLVED
from streams.replay.event_file import write_events_atomically

OUTCOMES_SUFFIX = ".outcomes.jsonl"
PROGRESS_EVERY = 100  # files between progress lines when stderr is no terminal


def add_import_parser(sub: Any) -> argparse.ArgumentParser:
    formats = ", ".join(f"{fmt.name} ({fmt.description})" for fmt in FORMATS.values())
    parser = sub.add_parser(
        "import",
        help="convert public agent trajectories into an event file (for replay, backtest)",
        description="Convert agent trajectories into loopguard's event file (JSON lines, "
        "what `replay --from-file` and `backtest --from-file` read), one run per "
        "trajectory, tool calls mapped to OpenClaw's tools (docs/importing.md), runs in "
        f"run-id order. Formats: {formats}. A directory is searched recursively for the "
        "format's files; a file that is not a valid trajectory of the format is skipped "
        "with a warning. Beside OUT, OUT.outcomes.jsonl gets one line per run: run_id, "
        "format, source, outcome (resolved, unresolved, unknown), calls, tokens. Both are "
        "written atomically. Exit code 0 once written, 2 for bad input (a missing path, "
        "nothing importable, an unreadable --results).",
    )
    parser.add_argument(
        "--format",
        dest="trajectory_format",
        required=True,
        choices=list(FORMATS),
        help="the trajectories' format",
    )
    parser.add_argument("paths", nargs="+", metavar="FILE_OR_DIR", help="trajectory files or dirs")
    parser.add_argument("-o", "--out", required=True, metavar="OUT", help="the event file to write")
    parser.add_argument(
        "--results",
        metavar="RESULTS_JSON",
        help="SWE-bench results (a `resolved` list of instance ids, or per-instance reports): "
        "runs it names are resolved or unresolved, the others unknown; without it, the "
        "label a trajectory carries, if any",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="print progress on stderr even when it is no terminal",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object (the JSON convention: docs/cli.md)",
    )
    return parser


def run_import(args: argparse.Namespace) -> int:
    try:
        return import_trajectories(args)
    except (InputError, LabelError) as exc:
        print(f"loopguard import: {exc}", file=sys.stderr)
        return EXIT_USAGE


def import_trajectories(args: argparse.Namespace) -> int:
    fmt = FORMATS[args.trajectory_format]
    out = Path(args.out)
    check_out(out)
    results = load_results(Path(args.results)) if args.results else None
    files = []
    for given in args.paths:
        path = Path(given)
        if not path.exists():
            raise InputError(f"{given}: no such file or directory")
        try:
            found = trajectory_files(fmt, path)
        except OSError as exc:
            raise InputError(f"{given}: cannot read ({exc.strerror or exc})") from None
        if not found:
            endings = ", ".join(f"*{suffix}" for suffix in fmt.suffixes)
            raise InputError(f"{given}: no {fmt.name} trajectory files ({endings}) under it")
        files.extend(found)
    progress = Progress(sys.stderr, args.progress)
    report = import_files(fmt, files, on_skip=progress.skip, on_progress=progress.tick)
    progress.done()
    if not report.runs:
        raise InputError(f"no {fmt.name} trajectories imported ({len(report.skipped)} skipped)")
    records = report.outcome_records(results)
    outcomes = out.with_name(out.name + OUTCOMES_SUFFIX)
    try:
        write_events_atomically(out, report.events())
        write_lines_atomically(outcomes, records)
    except OSError as exc:
        raise InputError(f"cannot write {exc.filename or out}: {exc.strerror or exc}") from None
    print_summary(report, records, out, outcomes, args.json)
    return EXIT_OK


def check_out(out: Path) -> None:
    """Refuse an output nobody can write before reading anything."""
    if out.is_dir():
        raise InputError(f"-o {out}: is a directory")
    if not out.resolve().parent.is_dir():
        raise InputError(f"-o {out}: no such directory {out.parent}")


def write_lines_atomically(path: Path, records: list[dict[str, Any]]) -> None:
    """JSON lines through a temporary file renamed when complete, as the event file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.resolve().parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def print_summary(
    report: ImportReport,
    records: list[dict[str, Any]],
    out: Path,
    outcomes: Path,
    as_json: bool,
) -> None:
    labels = Counter(record["outcome"] for record in records)
    counts = {label: labels.get(label, 0) for label in (RESOLVED, UNRESOLVED, UNKNOWN)}
    if as_json:
        summary = {
            "format": report.trajectory_format.name,
            "runs": len(report.runs),
            "calls": report.calls,
            "skipped": len(report.skipped),
            "outcomes": counts,
            "out": str(out),
            "outcomes_file": str(outcomes),
        }
        print(json.dumps(summary))
        return
    shown = ", ".join(f"{count} {label}" for label, count in counts.items())
    print(
        f"imported {len(report.runs)} runs ({shown}), {report.calls} calls, "
        f"{len(report.skipped)} skipped -> {out} (outcomes: {outcomes})"
    )


class Progress:
    """``imported N/M trajectories`` on stderr: rewritten in place on a terminal, a line every
    100 files with ``--progress`` elsewhere, nothing otherwise; skip warnings on their own
    lines."""

    def __init__(self, stream: TextIO, forced: bool) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.enabled = self.live or forced
        self.shown = False

    def tick(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        line = f"imported {done}/{total} trajectories"
        if self.live:
            self.stream.write(f"\r{line}")
            self.shown = True
        elif done % PROGRESS_EVERY == 0 or done == total:
            self.stream.write(line + "\n")
        self.stream.flush()

    def skip(self, skipped: Skipped) -> None:
        self.clear()
        self.stream.write(f"loopguard import: skipped {skipped.path}: {skipped.reason}\n")
        self.stream.flush()

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.shown = False

    def done(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.shown = False
        self.stream.flush()
