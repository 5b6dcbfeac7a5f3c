"""Status results (issue 44): what a status tool reports, without the parts that change on
every call.

``session_status`` answers with a status card ("🧮 Tokens: 12k in / 1.4k out", "📚 Context:
45k/200k (23%)", "🧵 Session: agent:main:main • updated 1m ago", the time of day): called again
and again, each card differs only in its clock, its relative times and its counters, which the
loop itself makes grow, so exact result hashing never saw two alike (openclaw#73763). For a
status tool, every number is such a counter: its results are hashed with datetimes, clock
times, durations, relative times ("just now", "2 minutes ago") and numbers masked, in its text
and in every string and number of its details; what is left (the model, the session, a state
such as "running" or "no activity") still tells two states apart.

Status tools: ``session_status`` unless ``deviations.maskStatusResults`` is off (the reference
hashes the card as it is), and any tool whose ``perTool`` entry sets ``statusResult: true``
(``false`` turns a built-in one off). Only results with no rule of their own are masked:
``exec``, ``process`` poll/log, sends and ``update_plan`` keep theirs.
"""

from __future__ import annotations

import re
from typing import Any

from streams.core.output_masks import normalize_output

# Built-in status tools (docs/reference.md, "Status results"): results whose every number is a
# counter or a clock. Other tools' numbers may be the progress (a poll's line count, a working
# subagent's tokens in a session list): name them in config when they are status cards.
STATUS_TOOLS = frozenset({"session_status"})

_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp]\.?[Mm]\.?)?(?![\w:])")
_DURATION = re.compile(
    r"(?i)(?<![\w.<-])\d+(?:\.\d+)?\s?(?:ms|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?"
    r"|d|days?|w|wks?|weeks?|mo|mos|months?|y|yrs?|years?)\b"
)
# Every duration is "<n>" by now, so "3h 20m ago" is "<n> <n> ago": one pass, no backtracking
# (the separators never start a "<n>" nor "ago").
_RELATIVE = re.compile(
    r"(?i)\b(?:just now|right now|moments? ago|a few \w+ ago|an? \w+ ago)\b|(?:<n>[ ,]*)+ago\b"
)
_NUMBER = re.compile(r"(?<![\w.<-])\d+(?:[.,]\d+)*(?:[A-Za-z]{1,2}|%)?(?![\w])")


def mask_status_text(text: str) -> str:
    """``text`` with datetimes, clock times, PIDs and durations masked as exec output is
    (outcomes.normalize_output), then dates, times of day, relative times and numbers."""
    text = normalize_output(text)
    if not any(char.isdigit() for char in text) and "ago" not in text and " now" not in text:
        return text
    text = _DATE.sub("<date>", text)
    text = _CLOCK.sub("<time>", text)
    text = _DURATION.sub("<n>", text)
    text = _RELATIVE.sub("<ago>", text)
    return _NUMBER.sub("<n>", text)


def mask_status_value(value: Any) -> Any:
    """A decoded JSON value with every number masked and every string as
    :func:`mask_status_text` (keys and booleans as they are)."""
    if isinstance(value, str):
        return mask_status_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return "<n>"
    if isinstance(value, dict):
        return {key: mask_status_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_status_value(item) for item in value]
    return value
