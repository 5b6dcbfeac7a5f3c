"""The same call failing the same way run after run of a session (issue 44): ``error_across_runs``.

A heartbeat whose one ``read`` fails with "tool not found" every 30 minutes is a loop that no
per-run count sees: each run holds one call, and heartbeats start fresh in session scope. So a
session keeps, apart from the window, a small memory of its failing calls: per call signature,
the error it last failed with (normalised as incidents normalise errors: ids, times, numbers
and paths masked) and in how many runs in a row that made the call it failed that way. It is
carried to every next run of the session, fresh-triggered ones included (it is about failures,
not about the window), whatever the time between. A success of the call forgets it, another
error starts the count again, a run that does not make the call leaves it as it is, and
loopguard's own veto (a blocked call) is no outcome. The call is warned from
``errorAcrossRuns.warningThreshold`` runs and blocked from ``criticalThreshold``; session scope
only, off under ``compat: "openclaw"``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from streams.core.config import LoopDetectionConfig
from streams.core.detectors import CRITICAL, WARNING, CurrentCall, Detection
from streams.core.failures import ERROR_HASH_PREFIX
from streams.core.incidents import normalise_error
from streams.core.progress import describe_call

# Signatures remembered per session; the one that failed longest ago is forgotten first.
MAX_FAILING_CALLS = 32
# How much of the error a reason quotes.
QUOTE_CHARS = 80


class FailingCall:
    """One signature's failures: the error, in how many runs in a row, the last such run."""

    __slots__ = ("error_hash", "runs", "last_run", "quote")

    def __init__(self, error_hash: str, runs: int, last_run: str, quote: str) -> None:
        self.error_hash = error_hash  # "error:" + digest of the normalised error
        self.runs = runs  # runs in a row (that made the call) in which it failed this way
        self.last_run = last_run  # the newest of them
        self.quote = quote  # the start of the error, for the reason

    def to_list(self) -> list[Any]:
        return [self.error_hash, self.runs, self.last_run, self.quote]


def error_key(error: str) -> tuple[str, str]:
    """The error's hash (what "the same way" compares) and its quote."""
    digest = hashlib.sha256(normalise_error(error).encode()).hexdigest()
    text = " ".join(error.split())
    if len(text) > QUOTE_CHARS:
        text = text[: QUOTE_CHARS - 1] + "…"
    return ERROR_HASH_PREFIX + digest, text


class FailingCalls:
    """A session's failing call signatures, oldest failure first (bounded)."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[str, FailingCall] = {}

    def failed(self, sig: str, error: str, run_id: str) -> None:
        """The call ``sig`` failed with ``error`` in run ``run_id``."""
        error_hash, quote = error_key(error)
        entries = self.entries
        entry = entries.pop(sig, None)  # re-inserted last: the newest failure goes last
        if entry is None or entry.error_hash != error_hash:
            if entry is None and len(entries) >= MAX_FAILING_CALLS:
                del entries[next(iter(entries))]
            entry = FailingCall(error_hash, 1, run_id, quote)
        elif entry.last_run != run_id:  # a run counts once, however often it failed
            entry.runs += 1
            entry.last_run = run_id
        entries[sig] = entry

    def succeeded(self, sig: str) -> None:
        """The call ``sig`` answered without an error: it is no longer failing."""
        self.entries.pop(sig, None)

    def to_list(self) -> list[Any]:
        return [[sig, *entry.to_list()] for sig, entry in self.entries.items()]

    @classmethod
    def from_list(cls, data: list[Any]) -> FailingCalls:
        calls = cls()
        for sig, error_hash, runs, last_run, quote in data:
            calls.entries[sig] = FailingCall(error_hash, int(runs), last_run, quote)
        return calls


def remembers_failures(cfg: LoopDetectionConfig) -> bool:
    """Whether the rule runs for ``cfg`` (a tool's view, where it has one): session scope,
    the rolling detectors on, and its switch on."""
    return cfg.session_scope and cfg.enabled is True and cfg.detectors.error_across_runs


def error_across_runs(
    calls: FailingCalls, call: CurrentCall, args_json: str | None, cfg: LoopDetectionConfig
) -> Detection | None:
    """The call about to happen failed the same way in ``runs`` runs of its session in a row."""
    entry = calls.entries.get(call.sig)
    if entry is None or entry.runs < cfg.error_across_runs_warning:
        return None
    runs = entry.runs
    what = describe_call(call.tool_name, args_json)
    said = f'{what} failed the same way in {runs} runs of this session in a row ("{entry.quote}")'
    if runs >= cfg.error_across_runs_critical:
        return Detection(
            CRITICAL,
            "error_across_runs",
            runs,
            f"CRITICAL: {said}. Session execution blocked: calling it unchanged will fail "
            "again; stop calling it and report what is failing.",
            entry.error_hash,
        )
    return Detection(
        WARNING,
        "error_across_runs",
        runs,
        f"WARNING: {said}. It will fail again unchanged: fix the cause or report it instead "
        "of retrying it every run.",
    )


def detect_across_runs(
    hit: Detection | None,
    calls: FailingCalls,
    call: CurrentCall,
    args_json: str | None,
    cfg: LoopDetectionConfig,
) -> Detection | None:
    """The earlier rules' finding ``hit`` with this rule after them: its critical replaces a
    warning, never another critical."""
    if (hit is not None and hit.level == CRITICAL) or not remembers_failures(cfg):
        return hit
    found = error_across_runs(calls, call, args_json, cfg)
    if found is None:
        return hit
    if hit is None or found.level == CRITICAL:
        return found
    return hit
