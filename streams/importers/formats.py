"""The trajectory formats ``loopguard import --format`` knows: each one's name, the file name
endings searched for under a directory, and its reader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streams.importers.openhands import read_openhands
from streams.importers.runs import ImportedRun


@dataclass(frozen=True, slots=True)
class TrajectoryFormat:
    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Path], list[ImportedRun]]
    description: str


FORMATS: dict[str, TrajectoryFormat] = {
    fmt.name: fmt
    for fmt in (
        TrajectoryFormat(
            "openhands",
            (".json", ".jsonl"),
            read_openhands,
            "OpenHands completion logs (SWE-bench trajs/*.json) or event streams",
        ),
    )
}
