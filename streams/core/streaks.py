"""How a call's streak fields follow from the calls before it: the rules behind every O(1)
streak query of streams.core.history, applied when a call is appended or gets its result.
"""

from __future__ import annotations

from streams.core.call_record import CallRecord


def previous_with_result(record: CallRecord, first_index: int) -> CallRecord | None:
    """The newest earlier call of ``record``'s signature that has a result, if one is still in
    the window (whose oldest record has index ``first_index``)."""
    prev = record.prev_same_sig
    while prev is not None and prev.index >= first_index:
        if prev.result_hash is not None:
            return prev
        prev = prev.prev_same_sig
    return None


def derive_streaks(
    record: CallRecord, prev: CallRecord | None, before: CallRecord | None, first_index: int
) -> None:
    """Derived fields of ``record`` given the one (``prev``) and two before it, in a window
    whose oldest record has index ``first_index``."""
    has_result = record.result_hash is not None

    if has_result:
        earlier = previous_with_result(record, first_index)
        if earlier is not None and earlier.result_hash == record.result_hash:
            record.no_progress_run = earlier.no_progress_run + 1
        else:
            record.no_progress_run = 1
    else:
        record.no_progress_run = 0

    if record.unknown_tool is None:
        record.unknown_run = 0
    elif (
        prev is not None
        and prev.tool_name == record.tool_name
        and prev.unknown_tool == record.unknown_tool
    ):
        record.unknown_run = prev.unknown_run + 1
    else:
        record.unknown_run = 1

    if prev is None or prev.sig == record.sig:
        record.alt_run = 1
        record.alt_break = -1 if has_result else record.index
    elif before is not None and before.sig == record.sig:
        record.alt_run = prev.alt_run + 1
        brk = prev.alt_break
        if not has_result:
            brk = record.index
        elif before.result_hash != record.result_hash:
            brk = max(brk, before.index)
        record.alt_break = brk
    else:
        record.alt_run = 2
        brk = -1 if prev.result_hash is not None else prev.index
        record.alt_break = brk if has_result else record.index
