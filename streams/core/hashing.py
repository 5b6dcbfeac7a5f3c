"""Stable hashes of tool calls and their outcomes: what counts as "the same call" and
"the same result".

Rules follow the reference runtime: canonical JSON (sorted keys) so key order never matters,
numbers as JavaScript holds them (``1`` and ``1.0`` are one value, as for a TypeScript
gateway); ``exec`` outcomes hash only status, exit code, timeout flag and trimmed
output; outbound message sends drop per-call ids and timestamps; errors hash their message;
a JSON ``null`` result is an outcome like any other. Two loopguard fixes on top: exec output
is normalised for clock times, durations and PIDs (changing timestamps kept the reference's
loops at warning), and the loop detector's own veto is reported separately so the engine can
count it as an outcome instead of freezing the streak. Every rule accepts any JSON value in
any field: an odd payload is hashed, never raised on.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from types import FrameType
from typing import Any

import orjson
from mypy_extensions import mypyc_attr

from streams.core.volatile import VolatileFields, strip_result

_MISSING = object()
_sha256 = hashlib.sha256


# The standard library's JSON recurses and gives up at Python's recursion limit, which
# counts the caller's frames too: whether a deeply nested value parsed or hashed would
# depend on where it was called from (worker vs. replay). So the fallback paths refuse past
# this fixed depth, and below it run with enough recursion headroom whatever the caller.
MAX_FALLBACK_DEPTH = 400
_HEADROOM = 2 * MAX_FALLBACK_DEPTH + 100


def _with_headroom(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a standard-library JSON function with room for MAX_FALLBACK_DEPTH levels."""
    frames = 0
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        frames, frame = frames + 1, frame.f_back
    limit = sys.getrecursionlimit()
    if frames + _HEADROOM <= limit:
        return fn(*args, **kwargs)
    sys.setrecursionlimit(frames + _HEADROOM)
    try:
        return fn(*args, **kwargs)
    finally:
        sys.setrecursionlimit(limit)


@mypyc_attr(native_class=False)  # builtin base: a plain Python class in the compiled build
class NestedTooDeepError(RecursionError):
    """JSON nested deeper than MAX_FALLBACK_DEPTH on the standard library path."""


_JSON_SPECIALS = re.compile(r'[\[\]{}"\\]')


def _text_depth(text: str) -> int:
    """Deepest bracket nesting of JSON text (brackets inside strings do not count), or 0
    when the text has too few brackets to pass MAX_FALLBACK_DEPTH at all.

    Linear in the text: each bracket, quote and backslash is looked at once.
    """
    if text.count("[") + text.count("{") <= MAX_FALLBACK_DEPTH:
        return 0
    depth = deepest = 0
    in_string = False
    escaped_at = -1
    for match in _JSON_SPECIALS.finditer(text):
        char, at = match.group(), match.start()
        if at == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _value_depth(value: Any) -> int:
    """Deepest list/dict nesting of a decoded value, without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list | tuple):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
    return deepest


# -- numbers as JavaScript holds them ---------------------------------------------------
#
# A TypeScript gateway parses JSON numbers into doubles: ``1`` and ``1.0`` are one value,
# ``12345678901234567890`` is the double nearest to it (``12345678901234567000``), NaN and
# infinities are written ``null``. A Python gateway sends the same values as Python writes
# them (``1.0``, every digit of a big integer). So canonical JSON holds every number as the
# double JavaScript would: the same call hashes the same whichever gateway sent it.
#
# orjson writes a double in its shortest round-trip form, so equal doubles already give
# equal bytes, except where Python keeps two types: an integral float (written ``1.0``)
# against an int (``1``), and an int beyond 2**53 against its double. The fast path
# serialises with orjson refusing such ints, and takes the slow path (numbers canonicalised,
# then serialised again) only when the output holds ``.0``: the common payload pays one
# substring test, not a walk over its values.

_SAFE_INTEGER = 2**53
_INFINITY = float("inf")
_SORT = orjson.OPT_SORT_KEYS
_SORT_STRICT = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER  # ints beyond 2**53 raise


def js_number(value: Any) -> Any:
    """A JSON number (int or float) as the double JavaScript holds: an int when integral
    and exactly held (|n| <= 2**53), None when not finite (JSON.stringify writes null),
    else a float."""
    number: float
    if type(value) is int:
        if -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
            return value
        try:
            number = float(value)  # the nearest double, as JSON.parse reads it
        except OverflowError:  # beyond any double: JavaScript reads Infinity
            return None
    else:
        number = value
    if number != number or number == _INFINITY or number == -_INFINITY:
        return None
    if number.is_integer() and -_SAFE_INTEGER <= number <= _SAFE_INTEGER:
        return int(number)
    return number


def _is_number(value: Any) -> bool:
    kind = type(value)
    return kind is int or kind is float


def canonical_numbers(value: Any) -> Any:
    """A copy of ``value`` with every number as :func:`js_number` gives it (iterative: any
    depth; ``value`` itself is left as it is)."""
    kind = type(value)
    if kind is int or kind is float:
        return js_number(value)
    if kind is not dict and kind is not list:
        return value
    root: Any = {} if kind is dict else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        if type(source) is dict:
            for key, item in source.items():
                kind = type(item)
                if kind is dict or kind is list:
                    child: Any = {} if kind is dict else []
                    stack.append((item, child))
                    target[key] = child
                else:
                    target[key] = js_number(item) if kind is int or kind is float else item
        else:
            for item in source:
                kind = type(item)
                if kind is dict or kind is list:
                    child = {} if kind is dict else []
                    stack.append((item, child))
                    target.append(child)
                else:
                    target.append(js_number(item) if kind is int or kind is float else item)
    return root


# JavaScript's ``undefined`` where a reference rule hashes a field without a ``?? null``:
# stable stringify writes it as the bare word, distinct from ``null`` and from any string.
UNDEFINED = orjson.Fragment(b"undefined")
_UNDEFINED_FALLBACK = "\x00undefined"  # the standard library path cannot write bare words


def _fallback_default(value: Any) -> Any:
    if value is UNDEFINED:
        return _UNDEFINED_FALLBACK
    return str(value)


def canonical_json(value: Any) -> bytes:
    """Key-order independent, whitespace free UTF-8 JSON, numbers as JavaScript holds them.

    orjson does the common case several times faster than the standard library; values it
    refuses (lone surrogates, non-string keys, nesting past 254) take the standard library's
    path, so every input still has exactly one canonical form; past ``MAX_FALLBACK_DEPTH``
    that path raises :class:`NestedTooDeepError`.
    """
    try:
        data = orjson.dumps(value, option=_SORT_STRICT)
    except (TypeError, orjson.JSONEncodeError):
        pass  # an integer beyond 2**53, or a value orjson refuses
    else:
        if b".0" not in data:  # no integral float below 2**53 (orjson writes those "N.0")
            return data
    value = canonical_numbers(value)
    try:
        return orjson.dumps(value, option=_SORT)
    except (TypeError, orjson.JSONEncodeError):
        if _value_depth(value) > MAX_FALLBACK_DEPTH:
            raise NestedTooDeepError(f"JSON nested deeper than {MAX_FALLBACK_DEPTH}") from None
        text = _with_headroom(
            json.dumps,
            value,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            default=_fallback_default,
        )
        return text.encode("utf-8", "surrogatepass")


def digest(value: Any) -> str:
    try:  # canonical_json's fast path inlined: this runs several times per event
        data = orjson.dumps(value, option=_SORT_STRICT)
    except (TypeError, orjson.JSONEncodeError):
        data = canonical_json(value)
    else:
        if b".0" in data:
            data = canonical_json(value)
    return _sha256(data).hexdigest()


def parse_json(text: str | None) -> Any:
    """Decode a JSON payload; text that is not JSON is hashed as the plain string it is."""
    if text is None:
        return _MISSING
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass  # may still be JSON orjson refuses (NaN, lone surrogates, huge ints)
    if _text_depth(text) > MAX_FALLBACK_DEPTH:
        return text
    try:
        return _with_headroom(json.loads, text)
    except (ValueError, RecursionError):
        return text


# What JavaScript's String.prototype.trim removes (WhiteSpace and LineTerminator): unlike
# str.strip, U+FEFF but not U+001C-U+001F or U+0085.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    return text.strip(JS_WHITESPACE)


def _normalize_update_plan(value: Any) -> Any:
    """Plan wording churn is not progress: keep only the status pattern of the plan."""
    if not isinstance(value, dict):
        return value
    plan = value.get("plan")
    if not isinstance(plan, list):
        plan = []
    steps = [entry if isinstance(entry, dict) else {} for entry in plan]
    explanation = value.get("explanation")
    return {
        "planLength": len(steps),
        "statuses": [s.get("status") if isinstance(s.get("status"), str) else None for s in steps],
        "stepPresence": [
            isinstance(s.get("step"), str) and bool(js_trim(s["step"])) for s in steps
        ],
        "hasExplanation": isinstance(explanation, str) and bool(js_trim(explanation)),
    }


def args_hash(tool_name: str, params: Any) -> str:
    """``tool:sha256(canonical params)`` — the call signature every detector compares."""
    if tool_name == "update_plan":
        params = _normalize_update_plan(params)
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


def _call_info(tool_name: str, args_json: str | None) -> CallInfo:
    # No args at all hashes as JSON null: a stable value, the same in every process.
    params = None if args_json is None else parse_json(args_json)
    try:
        sig = args_hash(tool_name, params)
    except RecursionError:  # nested too deep to canonicalise: hash the text as sent
        params = args_json
        sig = args_hash(tool_name, params)
    action = params.get("action") if isinstance(params, dict) else None
    return CallInfo(sig, is_known_poll_call(tool_name, params), action)


def call_info(tool_name: str, args_json: str | None) -> CallInfo:
    """Signature, poll flag and action of a call given its raw args JSON (memoised)."""
    key = (tool_name, args_json)
    info = _CALL_CACHE.get(key)
    if info is None:
        info = _call_info(tool_name, args_json)
        if isinstance(args_json, str) and len(args_json) <= MEMO_MAX_CHARS:
            _CALL_CACHE.put(key, info, len(tool_name) + len(args_json))
    return info


_UNKNOWN_TOOL_PATTERNS = (
    re.compile(r"unknown tool[:\s]+[\"']?([a-z0-9_.-]+)[\"']?", re.IGNORECASE),
    re.compile(
        r"tool\s+[\"']?([a-z0-9_.-]+)[\"']?\s+(?:not found|is not available)", re.IGNORECASE
    ),
)


def unknown_tool_name(error: str) -> str | None:
    """The missing tool named by errors like "unknown tool X" or "tool X not found"."""
    for pattern in _UNKNOWN_TOOL_PATTERNS:
        match = pattern.search(error)
        if match:
            return match.group(1).lower()
    return None


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


def _text_content(result: dict[str, Any]) -> str:
    content = result.get("content")
    if not isinstance(content, list):
        return ""
    parts = [
        text
        for entry in content
        if isinstance(entry, dict)
        and isinstance(entry.get("type"), str)
        and isinstance(text := entry.get("text"), str)
    ]
    return js_trim("\n".join(parts))


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _exec_outcome(details: dict[str, Any], result: dict[str, Any]) -> tuple[str | None, str | None]:
    """Stable command outcome only: duration, PID, session id and cwd are ignored.

    As the reference: the output is ``aggregated`` trimmed, or the text content when that is
    blank; any number is an exit code (``1.0`` is ``1``, see :func:`js_number`). Then
    loopguard masks clock times, durations and PIDs in it (:func:`normalize_output`).
    Returns (masked hash, exact hash): the second only when masking changed the output, for
    the post-compaction guard, which aborts on identical results only (see :class:`Outcome`).
    """
    status = _str_or_none(details.get("status"))
    if status == "running":
        tail = details.get("tail")
        text = tail if isinstance(tail, str) else ""
        masked = normalize_output(text)
        return (
            digest({"status": status, "tail": masked}),
            None if masked == text else digest({"status": status, "tail": text}),
        )
    if status in ("completed", "failed"):
        aggregated = details.get("aggregated")
        output = js_trim(aggregated) if isinstance(aggregated, str) else ""
        exit_code = details.get("exitCode")
        fields = {
            "status": status,
            "exitCode": exit_code if _is_number(exit_code) else None,
            "timedOut": details.get("timedOut") is True,
        }
        text = output or _text_content(result)
        masked = normalize_output(text)
        exact = None if masked == text else digest({**fields, "output": text})
        return digest({**fields, "output": masked}), exact
    if status in ("approval-pending", "approval-unavailable"):
        return digest(
            {
                "status": status,
                "reason": _str_or_none(details.get("reason")),
                "host": _str_or_none(details.get("host")),
                "command": _str_or_none(details.get("command")) or "",
                "warningText": _str_or_none(details.get("warningText")) or "",
            }
        ), None
    return None, None


SEND_LIKE_MESSAGE_ACTIONS = frozenset(
    {
        "send",
        "broadcast",
        "reply",
        "thread-reply",
        "sendWithEffect",
        "sendAttachment",
        "upload-file",
        "sticker",
        "poll",
    }
)
VOLATILE_SEND_KEYS = frozenset(
    {
        "messageId",
        "message_id",
        "messageIds",
        "platformMessageId",
        "platformMessageIds",
        "fileId",
        "file_id",
        "fileKey",
        "pollId",
        "poll_id",
        "receipt",
        "runId",
        "idempotencyKey",
        "ts",
        "timestamp",
        "sentAt",
        "deliveredAt",
        "createdAt",
    }
)


def is_outbound_send(tool_name: str, params: Any) -> bool:
    """Tools whose results carry fresh ids per call: sessions_send, conversations_send and
    conversations_turn, message sends, and (standing in for the reference's channel plugins,
    which a worker cannot see) ``*_send`` tools and sends of ``*_message`` tools."""
    return _is_send_action(tool_name, params.get("action") if isinstance(params, dict) else None)


# Tools whose every call is an outbound send, whatever its action (the reference's list).
ALWAYS_SEND_TOOLS = frozenset({"sessions_send", "conversations_send", "conversations_turn"})


def _is_send_action(tool_name: str, action: Any) -> bool:
    if tool_name in ALWAYS_SEND_TOOLS:
        return True
    if not isinstance(action, str):  # agents send anything; a list is not hashable
        action = None
    if tool_name == "message":
        return action in SEND_LIKE_MESSAGE_ACTIONS
    return tool_name.endswith("_send") or (
        tool_name.endswith("_message") and action in SEND_LIKE_MESSAGE_ACTIONS
    )


def _is_message_object(value: dict[str, Any]) -> bool:
    """A delivered message's own ``id`` is volatile; an ``id`` elsewhere is a stable fact."""
    return (
        isinstance(value.get("id"), str)
        and isinstance(value.get("text"), str)
        and (
            isinstance(value.get("direction"), str)
            or isinstance(value.get("senderId"), str)
            or isinstance(value.get("accountId"), str)
            or isinstance(value.get("conversation"), dict)
        )
    )


_CONTAINERS = (list, dict)


def strip_volatile_send_ids(value: Any) -> Any:
    if isinstance(value, list):
        return [
            strip_volatile_send_ids(item) if isinstance(item, _CONTAINERS) else item
            for item in value
        ]
    if not isinstance(value, dict):
        return value
    drop_id = _is_message_object(value)
    return {  # scalars are kept as they are without a call: most values are scalars
        key: strip_volatile_send_ids(nested) if isinstance(nested, _CONTAINERS) else nested
        for key, nested in value.items()
        if key not in VOLATILE_SEND_KEYS and not (key == "id" and drop_id)
    }


class Outcome:
    """A hashed tool outcome. ``result_hash`` is None when there is nothing to compare.

    ``exact_hash`` is set only where loopguard's masking of volatile output (exec datetimes,
    clock times, PIDs, durations) made ``result_hash`` equal for outputs that differ: the
    post-compaction guard compares with it, because its rule aborts on identical results
    only, while the rolling detectors keep the masked hash (a stuck command printing the
    time is no progress). Shared through the memo: never changed once built.
    """

    __slots__ = ("result_hash", "unknown_tool", "loop_veto", "exact_hash")

    def __init__(
        self,
        result_hash: str | None,
        unknown_tool: str | None = None,
        loop_veto: bool = False,
        exact_hash: str | None = None,
    ) -> None:
        self.result_hash = result_hash
        self.unknown_tool = unknown_tool
        self.loop_veto = loop_veto  # the gateway enforced loopguard's block (see history)
        self.exact_hash = exact_hash

    def __repr__(self) -> str:
        return (
            f"Outcome({self.result_hash!r}, {self.unknown_tool!r}, {self.loop_veto!r}, "
            f"{self.exact_hash!r})"
        )


def _bare_exec_output(text: str) -> Outcome:
    """An exec result sent as a bare string is the command's output: trimmed and masked like
    ``aggregated`` (``"ok\n"`` and ``"ok"`` are one outcome)."""
    output = js_trim(text)
    masked = normalize_output(output)
    exact = None if masked == output else digest({"output": output})
    return Outcome(digest({"output": masked}), exact_hash=exact)


def outcome_hash(tool_name: str, params: Any, result: Any, error: str | None) -> Outcome:
    """Hash what a tool returned, per the rules of its tool kind."""
    return _outcome(
        tool_name, params.get("action") if isinstance(params, dict) else None, result, error
    )


def result_outcome(
    tool_name: str, action: Any, result_json: str | None, error: str | None
) -> Outcome:
    """:func:`outcome_hash` from the raw result text, given the call's ``action`` only.

    Memoised like :func:`call_info` when ``action`` is a string or absent (other JSON
    values may be unhashable, or equal across types: ``1 == True``).
    """
    if action is not None and type(action) is not str:
        return _result_outcome(tool_name, action, result_json, error)
    key = (tool_name, action, result_json, error)
    outcome = _OUTCOME_CACHE.get(key)
    if outcome is None:
        outcome = _result_outcome(tool_name, action, result_json, error)
        chars = len(result_json or "") + len(error or "")
        if chars <= MEMO_MAX_CHARS:
            _OUTCOME_CACHE.put(key, outcome, len(tool_name) + chars)
    return outcome


def _result_outcome(
    tool_name: str, action: Any, result_json: str | None, error: str | None
) -> Outcome:
    try:
        return _outcome(tool_name, action, parse_json(result_json), error)
    except RecursionError:  # nested too deep to canonicalise: the raw text stands for itself
        return _outcome(tool_name, action, result_json, error)


def stripped_result_outcome(
    tool_name: str, action: Any, result_json: str | None, error: str | None, fields: VolatileFields
) -> Outcome:
    """:func:`result_outcome` for a tool with ``perTool`` volatile fields: they are stripped
    (volatile.py) from the parsed result before the usual rules hash it (exec, sends and the
    rest apply to what remains). Memoised on the fields too; an error or no result has
    nothing to strip, and text that is not JSON is hashed as it is."""
    if error is not None or result_json is None:
        return result_outcome(tool_name, action, result_json, error)
    if action is not None and type(action) is not str:
        return _stripped_outcome(tool_name, action, result_json, fields)
    key = (tool_name, action, result_json, None, fields.key)  # 5 items: never a plain key
    outcome = _OUTCOME_CACHE.get(key)
    if outcome is None:
        outcome = _stripped_outcome(tool_name, action, result_json, fields)
        if len(result_json) <= MEMO_MAX_CHARS:
            _OUTCOME_CACHE.put(key, outcome, len(tool_name) + len(result_json))
    return outcome


def _stripped_outcome(
    tool_name: str, action: Any, result_json: str, fields: VolatileFields
) -> Outcome:
    try:
        return _outcome(tool_name, action, strip_result(parse_json(result_json), fields), None)
    except RecursionError:  # nested too deep to canonicalise: the raw text stands for itself
        return _outcome(tool_name, action, result_json, None)


def _outcome(tool_name: str, action: Any, result: Any, error: str | None) -> Outcome:
    """The outcome rules; of the call's params only ``action`` ever matters."""
    if error is not None:
        return Outcome(
            f"error:{digest(error)}", unknown_tool_name(error) if isinstance(error, str) else None
        )
    if result is _MISSING:  # no result at all; JSON null is an outcome like any other
        return Outcome(None)
    if not isinstance(result, dict):
        if tool_name == "exec" and isinstance(result, str):
            return _bare_exec_output(result)
        return Outcome(digest(result))
    details = result.get("details")
    if not isinstance(details, dict):
        # A bare result object (neither ``details`` nor ``content``, as a gateway may send
        # what its tool returned) is its own details: hashed as an empty object, every such
        # result would be "the same" whatever it said.
        details = result if "details" not in result and "content" not in result else {}
    elif details.get("status") == "blocked" and details.get("deniedReason") == "tool-loop":
        return Outcome(None, loop_veto=True)
    # The text content is extracted only by the rules that hash it.
    if tool_name == "exec":
        exec_hash, exact = _exec_outcome(details, result)
        if exec_hash:
            return Outcome(exec_hash, exact_hash=exact)
    if tool_name == "process" and action in ("poll", "log"):
        keys = (
            ("status", "exitCode", "exitSignal", "aggregated")
            if action == "poll"
            else ("status", "totalLines", "totalChars", "truncated", "exitCode", "exitSignal")
        )
        fields = {key: details.get(key) for key in keys}
        if "status" not in details:  # the reference hashes a missing status as undefined
            fields["status"] = UNDEFINED
        return Outcome(digest({"action": action, **fields, "text": _text_content(result)}))
    if _is_send_action(tool_name, action):
        return Outcome(digest(strip_volatile_send_ids(details)))
    if tool_name == "update_plan":
        return Outcome(digest({"details": _normalize_update_plan(details), "text": ""}))
    return Outcome(digest({"details": details, "text": _text_content(result)}))
