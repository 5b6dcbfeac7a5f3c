"""The trajectory formats ``loopguard import --format`` knows: each one's name, the file name
endings searched for under a directory, and its reader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streams.importers import claude_code, mini_swe_agent, openclaw, openhands, swe_agent
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
            mini_swe_agent.NAME,
            (mini_swe_agent.SUFFIX,),
            mini_swe_agent.read_mini_swe_agent,
            "*.traj.json",
        ),
        TrajectoryFormat(swe_agent.NAME, (swe_agent.SUFFIX,), swe_agent.read_swe_agent, "*.traj"),
        TrajectoryFormat(
            openhands.NAME,
            openhands.SUFFIXES,
            openhands.read_openhands,
            "completion logs *.json as in SWE-bench trajs/, or event streams",
        ),
        TrajectoryFormat(
            claude_code.NAME,
            (claude_code.SUFFIX,),
            claude_code.read_claude_code,
            "session transcripts *.jsonl",
        ),
        TrajectoryFormat(
            openclaw.NAME,
            (openclaw.SUFFIX,),
            openclaw.read_openclaw,
            "session transcripts *.jsonl",
        ),
    )
}
