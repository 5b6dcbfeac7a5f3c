"""Masks for the parts of a command's output that change on every run of the same stuck
command (datetimes, clock times, PIDs, durations): exec outcomes (outcomes.py) and status
results (status_results.py) hash what is left.
"""

from __future__ import annotations

import re

# Volatile parts of command output that change on every run of the same stuck command.
_DATETIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b")
_PID = re.compile(r"\b(pid|PID)([=:\s]+)\d+")
# The lookahead only skips positions no keyword can start at (a cheap charset test instead
# of four case-insensitive alternatives at every position); what matches is unchanged.
_DURATION = re.compile(
    r"(?i)\b(?=[taei])(took|in|after|elapsed:?)\s+\d+(?:\.\d+)?\s?(ms|s|sec|secs|seconds)\b"
)


def _pid_repl(match: re.Match[str]) -> str:
    return f"{match[1]}{match[2]}<pid>"


def _duration_repl(match: re.Match[str]) -> str:
    return f"{match[1]} <duration>"


def normalize_output(text: str) -> str:
    """Mask datetimes, clock times, PIDs and durations, in that order.

    Callables instead of ``\\1`` templates (expanded in pure Python per match) and substring
    pre-checks that skip a pattern only when it cannot match (both clock patterns need a
    colon, the PID pattern needs ``pid``/``PID``) make this several times cheaper.
    """
    if ":" in text:
        text = _DATETIME.sub("<datetime>", text)
        if ":" in text:  # often the datetimes held the only colons
            text = _CLOCK.sub("<time>", text)
    if "pid" in text or "PID" in text:
        text = _PID.sub(_pid_repl, text)
    return _DURATION.sub(_duration_repl, text)
