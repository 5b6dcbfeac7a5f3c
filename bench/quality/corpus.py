"""Reading what the benchmark scores: event files as ``loopguard import`` writes them, each
with its outcomes sidecar, and a reader's stuck labels.

An event file ``X.jsonl`` holds whole runs (RunStarted, ToolCall/ToolResult pairs, RunEnded);
``X.jsonl.outcomes.jsonl`` beside it has one line per run: ``{"run_id", "outcome":
"resolved"|"unresolved"|"unknown", ...}``. Labels are JSON lines ``{"run_id", "stuck",
"from_call", "why"}``; a run not in them is unlabelled.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from streams.core.events import AgentEvent, RunEnded, ToolCall, ToolResult
from streams.replay.event_file import parse_event_line

OUTCOMES_SUFFIX = ".outcomes.jsonl"
RESOLVED, UNRESOLVED, UNKNOWN = "resolved", "unresolved", "unknown"
CHARS_PER_TOKEN = 4  # the estimate where a run reports no usage: characters / 4


@dataclass(frozen=True)
class CallCost:
    """What one tool call cost: its model turn's tokens where the event says, and the
    characters of its args and result (the estimate's base)."""

    tokens: int | None
    chars: int


@dataclass
class Run:
    """One run's events in seq order, its outcome, and what each call cost."""

    run_id: str
    outcome: str = UNKNOWN
    events: list[AgentEvent] = field(default_factory=list)
    costs: list[CallCost] = field(default_factory=list)
    final_tokens: int | None = None  # the last model turn's (RunEnded), asking for no tool
    # seq -> the first call that could still be stopped once that event is seen: a call's own
    # index (1-based), or the next call's for anything after a call (a result, RunEnded)
    stop_call: dict[int, int] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return len(self.costs)

    @property
    def has_usage(self) -> bool:
        return any(cost.tokens is not None for cost in self.costs)

    def tokens_from(self, call: int) -> tuple[int, bool]:
        """Tokens of the calls from ``call`` (1-based) on, and whether they are estimated:
        the model's usage where the run's events carry any, else characters / 4."""
        later = self.costs[call - 1 :]
        if self.has_usage:
            return sum(c.tokens or 0 for c in later) + (self.final_tokens or 0), False
        return sum(c.chars for c in later) // CHARS_PER_TOKEN, True


@dataclass(frozen=True)
class Label:
    run_id: str
    stuck: bool
    from_call: int | None
    why: str = ""


def event_files(paths: list[Path]) -> list[Path]:
    """The event files named, a directory standing for its ``*.jsonl`` (sidecars excepted)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(
                p for p in sorted(path.glob("*.jsonl")) if not p.name.endswith(OUTCOMES_SUFFIX)
            )
        elif path.is_file():
            found.append(path)
        else:
            raise ValueError(f"{path}: no such file or directory")
    if not found:
        raise ValueError(f"no event files in {', '.join(map(str, paths))}")
    return found


def json_lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                yield number, line


def read_events(path: Path) -> Iterator[AgentEvent]:
    for number, line in json_lines(path):
        try:
            yield parse_event_line(line)
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: {exc}") from None


def read_outcomes(path: Path) -> dict[str, str]:
    """The sidecar's outcome per run id; no sidecar, no outcomes (every run unknown)."""
    sidecar = path.with_name(path.name + OUTCOMES_SUFFIX)
    if not sidecar.exists():
        return {}
    outcomes: dict[str, str] = {}
    for number, line in json_lines(sidecar):
        row = json.loads(line)
        outcome = row.get("outcome", UNKNOWN)
        if outcome not in (RESOLVED, UNRESOLVED, UNKNOWN):
            raise ValueError(f"{sidecar}:{number}: outcome {outcome!r}")
        outcomes[row["run_id"]] = outcome
    return outcomes


def read_corpus(paths: list[Path]) -> tuple[list[AgentEvent], dict[str, Run]]:
    """Every event in file order (how the core is fed) and the runs they make up."""
    events: list[AgentEvent] = []
    runs: dict[str, Run] = {}
    for path in event_files(paths):
        outcomes = read_outcomes(path)
        for event in read_events(path):
            events.append(event)
            run_id = event.envelope.run_id
            if run_id not in runs:
                runs[run_id] = Run(run_id, outcomes.get(run_id, UNKNOWN))
            runs[run_id].events.append(event)
    for run in runs.values():
        index_calls(run)
    return events, runs


def index_calls(run: Run) -> None:
    """Order the run's events by seq, then note each call's cost and where a stop would land."""
    run.events.sort(key=lambda e: e.envelope.seq)
    results = {
        e.tool_call_id: e for e in run.events if isinstance(e, ToolResult) and e.tool_call_id
    }
    calls = 0
    for event in run.events:
        if isinstance(event, ToolCall):
            calls += 1
            run.stop_call[event.envelope.seq] = calls
            result = results.get(event.tool_call_id) if event.tool_call_id else None
            chars = len(event.args_json or "")
            if result is not None:
                chars += len(result.result_json or "") + len(result.error or "")
            tokens = None
            if event.input_tokens is not None or event.output_tokens is not None:
                tokens = (event.input_tokens or 0) + (event.output_tokens or 0)
            run.costs.append(CallCost(tokens, chars))
        else:
            run.stop_call[event.envelope.seq] = calls + 1
            if isinstance(event, RunEnded) and (event.input_tokens or event.output_tokens):
                run.final_tokens = (event.input_tokens or 0) + (event.output_tokens or 0)


def read_labels(path: Path | None) -> dict[str, Label]:
    if path is None:
        return {}
    labels: dict[str, Label] = {}
    for number, line in json_lines(path):
        row = json.loads(line)
        if not isinstance(row.get("stuck"), bool) or not row.get("run_id"):
            raise ValueError(f"{path}:{number}: expected run_id and stuck: true|false")
        from_call = row.get("from_call")
        labels[row["run_id"]] = Label(row["run_id"], row["stuck"], from_call, row.get("why", ""))
    return labels


def audit_labels(db_url: str) -> dict[str, Label]:
    """Labels from an audit trail's operator commands (issue 43): a released run is not
    stuck (a false stop), a run an operator aborted is (a true one); from which call is not
    known. Raises ValueError naming the trail when it cannot be read."""
    from sqlalchemy.exc import SQLAlchemyError

    from streams.audit.labels import trail_quality
    from streams.audit.store import AuditStore
    from streams.cli.common import missing_sqlite_file

    missing = missing_sqlite_file(db_url)
    if missing is not None:
        raise ValueError(f"--labels-from-audit: no audit trail at {missing}")
    try:
        with AuditStore(db_url) as store:
            found = trail_quality(store).labels
    except SQLAlchemyError as exc:
        raise ValueError(f"--labels-from-audit: {str(exc).splitlines()[0][:200]}") from None
    return {
        run_id: Label(run_id, label.stuck, None, f"operator {label.why} ({label.rule})")
        for run_id, label in found.items()
    }
