"""Stable hashes of tool calls and their outcomes, memoised on the raw texts.

A call's signature is ``tool:sha256(canonical params)`` (canonical.py: key order never
matters, numbers as JavaScript holds them) of the params without the args that do not change
what the call does (call_identity.py); its outcome follows the rules of outcomes.py.
Every rule accepts any JSON value in any field: an odd payload is hashed, never raised on.
"""

from __future__ import annotations

from typing import Any

from mypy_extensions import mypyc_attr

from streams.core.call_identity import identity_params
from streams.core.canonical import digest, parse_json
from streams.core.deviations import RAW_UPDATE_PLAN
from streams.core.outcomes import Outcome, normalize_update_plan, tool_outcome
from streams.core.volatile import VolatileFields, strip_result


def args_hash(tool_name: str, params: Any, rules: int = 0) -> str:
    """``tool:sha256(canonical params)`` — the call signature every detector compares
    (``rules``: deviations.py bits; only ``updatePlanShape`` matters here)."""
    if tool_name == "update_plan" and not rules & RAW_UPDATE_PLAN:
        params = normalize_update_plan(params)
    return f"{tool_name}:{digest(params)}"


def is_known_poll_call(tool_name: str, params: Any) -> bool:
    """``command_status``, or ``process`` with action poll/log: polling tools by design."""
    if tool_name == "command_status":
        return True
    return (
        tool_name == "process"
        and isinstance(params, dict)
        and params.get("action") in ("poll", "log")
    )


class CallInfo:
    """What the detectors need from a call's args text, computed once per distinct text.

    Like the other small per-event values, a slotted class never changed once built: built
    faster than a NamedTuple interpreted, and natively in the mypyc build (setup.py).
    """

    __slots__ = ("sig", "known_poll", "action")

    def __init__(self, sig: str, known_poll: bool, action: Any) -> None:
        self.sig = sig  # args hash
        self.known_poll = known_poll
        self.action = action  # params["action"] when params is an object, else None

    def __repr__(self) -> str:
        return f"CallInfo({self.sig!r}, {self.known_poll!r}, {self.action!r})"


# Looping agents resend byte-identical args (a result usually echoes its call's args too)
# and a stuck tool returns byte-identical results: both hashes are memoised on the exact
# input texts, so a hit is always what the slow path would compute. Texts over
# MEMO_MAX_CHARS are never kept, and a memo is emptied before its texts would pass
# MEMO_BUDGET_CHARS or its entries MEMO_ENTRIES: bounded by size, not just by count, so
# small texts (the usual ones) get many entries and huge ones cannot pile up. Both memos
# full of ASCII texts hold about 10 MB (14 MB peak while refilling).
MEMO_ENTRIES = 16_384
MEMO_MAX_CHARS = 2048
MEMO_BUDGET_CHARS = 4_194_304


@mypyc_attr(native_class=False)
class _Memo(dict[Any, Any]):
    """An exact-input memo with a character budget."""

    __slots__ = ("chars",)

    def __init__(self) -> None:
        super().__init__()
        self.chars = 0

    def put(self, key: Any, value: Any, chars: int) -> None:
        if self.chars + chars > MEMO_BUDGET_CHARS or len(self) >= MEMO_ENTRIES:
            self.clear()
        self[key] = value
        self.chars += chars

    def clear(self) -> None:
        super().clear()
        self.chars = 0


_CALL_CACHE = _Memo()  # (tool name, args text) -> CallInfo
_OUTCOME_CACHE = _Memo()  # (tool name, action, result text, error) -> Outcome


def clear_memos() -> None:
    """Forget every memoised hash (benchmarks start each timed pass cold)."""
    _CALL_CACHE.clear()
    _OUTCOME_CACHE.clear()


def _call_info(
    tool_name: str, args_json: str | None, rules: int, ignored: VolatileFields | None
) -> CallInfo:
    # No args at all hashes as JSON null: a stable value, the same in every process.
    params = None if args_json is None else parse_json(args_json)
    try:
        sig = args_hash(tool_name, identity_params(tool_name, params, rules, ignored), rules)
    except RecursionError:  # nested too deep to canonicalise: hash the text as sent
        params = args_json
        sig = args_hash(tool_name, params, rules)
    action = params.get("action") if isinstance(params, dict) else None
    return CallInfo(sig, is_known_poll_call(tool_name, params), action)


def call_info(
    tool_name: str,
    args_json: str | None,
    rules: int = 0,
    ignored: VolatileFields | None = None,
) -> CallInfo:
    """Signature, poll flag and action of a call given its raw args JSON (memoised;
    ``rules``: the deviations switched to the reference's hashing, deviations.py;
    ``ignored``: the tool's ``perTool`` ``ignoredArgs``, left out of the signature)."""
    key: tuple[Any, ...]
    if ignored is not None:  # 4 items: never a key of the two forms below
        key = (tool_name, args_json, rules, ignored.key)
    else:
        key = (tool_name, args_json) if not rules else (tool_name, args_json, rules)
    info = _CALL_CACHE.get(key)
    if info is None:
        info = _call_info(tool_name, args_json, rules, ignored)
        if isinstance(args_json, str) and len(args_json) <= MEMO_MAX_CHARS:
            _CALL_CACHE.put(key, info, len(tool_name) + len(args_json))
    return info


def result_outcome(
    tool_name: str, action: Any, result_json: str | None, error: str | None, rules: int = 0
) -> Outcome:
    """:func:`outcome_hash` from the raw result text, given the call's ``action`` only.

    Memoised like :func:`call_info` when ``action`` is a string or absent (other JSON
    values may be unhashable, or equal across types: ``1 == True``). ``rules``: as
    :func:`call_info`; a key holds them only when they are not loopguard's own (0).
    """
    if action is not None and type(action) is not str:
        return _result_outcome(tool_name, action, result_json, error, rules)
    key: tuple[Any, ...] = (
        (tool_name, action, result_json, error)
        if not rules
        else (tool_name, action, result_json, error, rules)
    )
    outcome = _OUTCOME_CACHE.get(key)
    if outcome is None:
        outcome = _result_outcome(tool_name, action, result_json, error, rules)
        chars = len(result_json or "") + len(error or "")
        if chars <= MEMO_MAX_CHARS:
            _OUTCOME_CACHE.put(key, outcome, len(tool_name) + chars)
    return outcome


def _result_outcome(
    tool_name: str, action: Any, result_json: str | None, error: str | None, rules: int
) -> Outcome:
    try:
        return tool_outcome(tool_name, action, parse_json(result_json), error, rules)
    except RecursionError:  # nested too deep to canonicalise: the raw text stands for itself
        return tool_outcome(tool_name, action, result_json, error, rules)


def stripped_result_outcome(
    tool_name: str,
    action: Any,
    result_json: str | None,
    error: str | None,
    fields: VolatileFields,
    rules: int = 0,
) -> Outcome:
    """:func:`result_outcome` for a tool with ``perTool`` volatile fields: they are stripped
    (volatile.py) from the parsed result before the usual rules hash it (exec, sends and the
    rest apply to what remains). Memoised on the fields too; an error or no result has
    nothing to strip, and text that is not JSON is hashed as it is."""
    if error is not None or result_json is None:
        return result_outcome(tool_name, action, result_json, error, rules)
    if action is not None and type(action) is not str:
        return _stripped_outcome(tool_name, action, result_json, fields, rules)
    # 5 items (6 with rules), the 5th a string: never a plain key nor one with rules
    key: tuple[Any, ...] = (
        (tool_name, action, result_json, None, fields.key)
        if not rules
        else (tool_name, action, result_json, None, fields.key, rules)
    )
    outcome = _OUTCOME_CACHE.get(key)
    if outcome is None:
        outcome = _stripped_outcome(tool_name, action, result_json, fields, rules)
        if len(result_json) <= MEMO_MAX_CHARS:
            _OUTCOME_CACHE.put(key, outcome, len(tool_name) + len(result_json))
    return outcome


def _stripped_outcome(
    tool_name: str, action: Any, result_json: str, fields: VolatileFields, rules: int
) -> Outcome:
    try:
        stripped = strip_result(parse_json(result_json), fields)
        return tool_outcome(tool_name, action, stripped, None, rules)
    except RecursionError:  # nested too deep to canonicalise: the raw text stands for itself
        return tool_outcome(tool_name, action, result_json, None, rules)
