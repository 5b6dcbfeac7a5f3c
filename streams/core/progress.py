"""Rules that see progress (loopguard extension, issue 38): loops whose every round holds other
calls, so no window streak of the reference's detectors ever reaches its threshold.

- ``unchanged_outcome``: the same call gave the same outcome again and again, with other
  calls (edits, usually) between; edits that change nothing the call can see are no progress,
  however many there are. Counted over the whole run (streams.core.outcome_memory); warn at
  ``unchangedOutcome.warningThreshold`` earlier identical outcomes, block at
  ``criticalThreshold``.
- ``repeated_cycle``: a cycle of 3 or 4 calls repeats with every call and outcome identical
  (edit, ``rm``, create, run, edit, ``rm``...); warn and block at ``repeatedCycle``'s
  thresholds, counted in complete earlier rounds. Shorter cycles are the reference's
  generic repeat (1) and ping-pong (2).

Counts follow the detectors' convention: earlier outcomes only, the current call never
included. The thresholds were chosen on real agent runs (docs/detection-quality.md).
"""

from __future__ import annotations

from streams.core.call_record import CallRecord
from streams.core.canonical import parse_json
from streams.core.config import LoopDetectionConfig
from streams.core.detectors import CRITICAL, WARNING, CurrentCall, Detection
from streams.core.history import RunHistory
from streams.core.outcome_memory import OutcomeMemory, OutcomeStreak

CYCLE_LENGTHS = (3, 4)
# From this many alternating calls (A, B, A and the current B) a tail is ping-pong's case.
PING_PONG_CALLS = 4
# How much of a command or path a reason quotes.
QUOTE_CHARS = 80


def describe_call(tool_name: str, args_json: str | None) -> str:
    """What an operator and a model recognise the call by: an exec's command, a file tool's
    path, else the tool's name. Only built when a rule fires."""
    params = parse_json(args_json)  # bounded: hostile nesting is no crash here either
    if isinstance(params, dict):
        for key in ("command", "cmd", "path", "file_path", "url", "query"):
            value = params.get(key)
            if isinstance(value, str) and value.strip():
                text = " ".join(value.split())
                if len(text) > QUOTE_CHARS:
                    text = text[: QUOTE_CHARS - 1] + "…"
                return f"{tool_name} `{text}`"
    return tool_name


def unchanged_outcome(
    streak: OutcomeStreak | None,
    index: int,
    changes: int,
    within: int,
    call: CurrentCall,
    args_json: str | None,
    cfg: LoopDetectionConfig,
) -> Detection | None:
    """The call at ``index`` repeats one whose last ``streak.count`` outcomes were the same."""
    if streak is None or streak.count < cfg.unchanged_outcome_warning:
        return None
    if index - streak.last_index > within:  # this repeat would start a new streak
        return None
    if index - streak.first_index <= streak.count:
        return None  # no other call anywhere between: the reference's generic repeat's case
    count = streak.count
    what = describe_call(call.tool_name, args_json)
    edits = changes - streak.changes_at_first
    between = f", with {edits} edit{'s' if edits != 1 else ''} between" if edits else ""
    since = f"{what} returned the same result {count} times since call {streak.first_index + 1}"
    if count >= cfg.unchanged_outcome_critical:
        return Detection(
            CRITICAL,
            "unchanged_outcome",
            count,
            f"CRITICAL: {since}{between}. Nothing changed what it returns: session "
            "execution blocked. Try a different approach, or report the task as failed.",
            streak.result_hash,
        )
    return Detection(
        WARNING,
        "unchanged_outcome",
        count,
        f"WARNING: {since}{between}. Running it again will not tell you anything new; "
        "change the approach, or report the task as failed if you are stuck.",
    )


def cycle_rounds(records: list[CallRecord], sig: str, length: int) -> int:
    """Complete earlier rounds of a ``length``-call cycle with identical calls and outcomes
    that the call ``sig`` goes on with (0 when the tail is no such cycle)."""
    size = len(records)
    if size < 2 * length or records[size - length].sig != sig:
        return 0
    # The cycle must really be ``length`` long: not one call repeated (generic repeat), nor
    # two alternating (ping-pong) inside a cycle of four.
    first = records[size - length]
    if all(records[size - j].sig == first.sig for j in range(1, length)):
        return 0
    if (
        length == 4
        and records[size - 1].sig == records[size - 3].sig
        and records[size - 2].sig == records[size - 4].sig
    ):
        return 0
    periodic = 0
    position = size - 1
    while position - length >= 0:
        newer, older = records[position], records[position - length]
        if (
            newer.sig != older.sig
            or newer.result_hash is None
            or newer.result_hash != older.result_hash
        ):
            break
        periodic += 1
        position -= 1
    return (periodic + length) // length if periodic >= length else 0


def repeated_cycle(
    history: RunHistory, call: CurrentCall, cfg: LoopDetectionConfig
) -> Detection | None:
    """A 3- or 4-call cycle with unchanged outcomes, repeated ``rounds`` times so far."""
    records = history.records
    if len(records) < 2 * CYCLE_LENGTHS[0]:
        return None
    for length in CYCLE_LENGTHS:
        rounds = cycle_rounds(records, call.sig, length)
        if rounds < cfg.repeated_cycle_warning:
            continue
        calls = ", ".join(record.tool_name for record in records[len(records) - length :])
        if rounds >= cfg.repeated_cycle_critical:
            return Detection(
                CRITICAL,
                "repeated_cycle",
                rounds,
                f"CRITICAL: the same {length} calls ({calls}) have repeated {rounds} times "
                "with identical results. Session execution blocked: this cycle makes no "
                "progress; try a different approach or report the task as failed.",
                records[-1].result_hash or "",
            )
        return Detection(
            WARNING,
            "repeated_cycle",
            rounds,
            f"WARNING: the same {length} calls ({calls}) have repeated {rounds} times with "
            "identical results. Break the cycle: change the approach, or report the task "
            "as failed.",
        )
    return None


def detect_progress(
    hit: Detection | None,
    history: RunHistory,
    memory: OutcomeMemory,
    call: CurrentCall,
    args_json: str | None,
    cfg: LoopDetectionConfig,
) -> Detection | None:
    """The earlier rules' finding ``hit`` (reference chain and failure rules) with these two
    rules after them: a critical of theirs wins over a warning, never over a critical."""
    if cfg.enabled is not True or (hit is not None and hit.level == CRITICAL):
        return hit
    switches = cfg.detectors
    found = None
    if switches.unchanged_outcome:
        streak = memory.get(call.sig)
        # An A/B alternation is ping-pong's to judge (its changing side is progress there).
        if streak is not None and history.ping_pong(call.sig).calls < PING_PONG_CALLS:
            index = history.next_index
            found = unchanged_outcome(
                streak, index, memory.changes, history.max_size, call, args_json, cfg
            )
    if switches.repeated_cycle and (found is None or found.level != CRITICAL):
        cycle = repeated_cycle(history, call, cfg)
        if cycle is not None and (found is None or cycle.level == CRITICAL):
            found = cycle
    if found is None:
        return hit
    if hit is None or found.level == CRITICAL:
        return found
    return hit
