"""The outcome rules: what counts as "the same result" of a tool call, per tool kind.

As the reference runtime: ``exec`` outcomes hash only status, exit code, timeout flag and
trimmed output; outbound message sends drop per-call ids and timestamps; errors hash their
message; a JSON ``null`` result is an outcome like any other. Two loopguard fixes on top:
exec output is normalised for clock times, durations and PIDs (changing timestamps kept the
reference's loops at warning), and the loop detector's own veto is reported separately so
the engine can count it as an outcome instead of freezing the streak; a status tool's clocks
and counters are masked too (status_results.py, issue 44). hashing.py memoises these rules on
the raw texts.
"""

from __future__ import annotations

import re
from typing import Any

from streams.core.canonical import MISSING, UNDEFINED, digest, is_number, js_trim
from streams.core.deviations import (
    BUILTIN_SENDS,
    RAW_EXEC_OUTPUT,
    RAW_STATUS_RESULTS,
    RAW_UPDATE_PLAN,
    STATUS_RESULT,
    WRAPPED_RESULTS,
)
from streams.core.output_masks import normalize_output
from streams.core.status_results import STATUS_TOOLS, mask_status_text, mask_status_value


def normalize_update_plan(value: Any) -> Any:
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


# What OpenClaw's exec shows the model for a command that printed nothing.
NO_OUTPUT = "(no output)"


def _silent_exec(details: dict[str, Any], result: dict[str, Any]) -> bool:
    """A finished command that printed nothing (``rm``, ``mkdir``): its exit code is all it
    said. ``aggregated`` is the output when present (its text then says "(no output)").
    Only asked when an exec outcome is built (memoised on the result text)."""
    if details.get("status") not in ("completed", "failed"):
        return False
    aggregated = details.get("aggregated")
    if isinstance(aggregated, str):
        return not js_trim(aggregated)
    text = _text_content(result)
    return not text or text == NO_OUTPUT


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _exec_outcome(
    details: dict[str, Any], result: dict[str, Any], mask: bool = True
) -> tuple[str | None, str | None]:
    """Stable command outcome only: duration, PID, session id and cwd are ignored.

    As the reference: the output is ``aggregated`` trimmed, or the text content when that is
    blank; any number is an exit code (``1.0`` is ``1``, see :func:`js_number`). Then
    loopguard masks clock times, durations and PIDs in it (:func:`normalize_output`).
    Returns (masked hash, exact hash): the second only when masking changed the output, for
    the post-compaction guard, which aborts on identical results only (see :class:`Outcome`).
    ``mask`` false (``deviations.maskExecOutput: false``) hashes the output as it is.
    """
    status = _str_or_none(details.get("status"))
    if status == "running":
        tail = details.get("tail")
        text = tail if isinstance(tail, str) else ""
        masked = normalize_output(text) if mask else text
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
            "exitCode": exit_code if is_number(exit_code) else None,
            "timedOut": details.get("timedOut") is True,
        }
        text = output or _text_content(result)
        masked = normalize_output(text) if mask else text
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


def is_outbound_send(tool_name: str, params: Any, by_name: bool = True) -> bool:
    """Tools whose results carry fresh ids per call: sessions_send, conversations_send and
    conversations_turn, message sends, and (standing in for the reference's channel plugins,
    which a worker cannot see) ``*_send`` tools and sends of ``*_message`` tools, unless
    ``by_name`` is false (``deviations.sendsByToolName: false``)."""
    action = params.get("action") if isinstance(params, dict) else None
    return _is_send_action(tool_name, action, by_name)


# Tools whose every call is an outbound send, whatever its action (the reference's list).
ALWAYS_SEND_TOOLS = frozenset({"sessions_send", "conversations_send", "conversations_turn"})


def _is_send_action(tool_name: str, action: Any, by_name: bool = True) -> bool:
    if tool_name in ALWAYS_SEND_TOOLS:
        return True
    if not isinstance(action, str):  # agents send anything; a list is not hashable
        action = None
    if tool_name == "message":
        return action in SEND_LIKE_MESSAGE_ACTIONS
    return by_name and (
        tool_name.endswith("_send")
        or (tool_name.endswith("_message") and action in SEND_LIKE_MESSAGE_ACTIONS)
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

    ``counters`` marks a status report whose masked counters and clocks differed from the
    plain result (status_results.py): back to back they are the loop's own trace, but with
    other calls between they are that work's, so ``unchanged_outcome`` does not count it.
    """

    __slots__ = ("result_hash", "unknown_tool", "loop_veto", "exact_hash", "empty", "counters")

    def __init__(
        self,
        result_hash: str | None,
        unknown_tool: str | None = None,
        loop_veto: bool = False,
        exact_hash: str | None = None,
        empty: bool = False,
        counters: bool = False,
    ) -> None:
        self.result_hash = result_hash
        self.unknown_tool = unknown_tool
        self.loop_veto = loop_veto  # the gateway enforced loopguard's block (see history)
        self.exact_hash = exact_hash
        # Nothing in it (no output, no text, no details): a repeat tells the agent nothing
        # new either way (streams.core.outcome_memory ignores it).
        self.empty = empty
        self.counters = counters

    def __repr__(self) -> str:
        return (
            f"Outcome({self.result_hash!r}, {self.unknown_tool!r}, {self.loop_veto!r}, "
            f"{self.exact_hash!r}, {self.empty!r}, {self.counters!r})"
        )


def _bare_exec_output(text: str, mask: bool) -> Outcome:
    """An exec result sent as a bare string is the command's output: trimmed and masked like
    ``aggregated`` (``"ok\n"`` and ``"ok"`` are one outcome)."""
    output = js_trim(text)
    masked = normalize_output(output) if mask else output
    exact = None if masked == output else digest({"output": output})
    return Outcome(digest({"output": masked}), exact_hash=exact, empty=not output)


def outcome_hash(
    tool_name: str, params: Any, result: Any, error: str | None, rules: int = 0
) -> Outcome:
    """Hash what a tool returned, per the rules of its tool kind."""
    return tool_outcome(
        tool_name, params.get("action") if isinstance(params, dict) else None, result, error, rules
    )


def tool_outcome(
    tool_name: str, action: Any, result: Any, error: str | None, rules: int = 0
) -> Outcome:
    """The outcome rules; of the call's params only ``action`` ever matters. ``rules``: the
    deviations switched to the reference's rule (deviations.py bits; 0: none)."""
    if error is not None:
        return Outcome(
            f"error:{digest(error)}", unknown_tool_name(error) if isinstance(error, str) else None
        )
    if result is MISSING:  # no result at all; JSON null is an outcome like any other
        return Outcome(None)
    bare = not rules & WRAPPED_RESULTS
    mask = not rules & RAW_EXEC_OUTPUT
    if not isinstance(result, dict):
        if tool_name == "exec" and isinstance(result, str) and bare:
            return _bare_exec_output(result, mask)
        if isinstance(result, str) and is_status_tool(tool_name, rules):
            return _status_outcome(None, js_trim(result), digest(result))
        return Outcome(digest(result), empty=result is None or result == "")
    details = result.get("details")
    if not isinstance(details, dict):
        # A bare result object (neither ``details`` nor ``content``, as a gateway may send
        # what its tool returned) is its own details: hashed as an empty object, every such
        # result would be "the same" whatever it said.
        own = bare and "details" not in result and "content" not in result
        details = result if own else {}
    elif details.get("status") == "blocked" and details.get("deniedReason") == "tool-loop":
        return Outcome(None, loop_veto=True)
    # The text content is extracted only by the rules that hash it.
    if tool_name == "exec":
        exec_hash, exact = _exec_outcome(details, result, mask)
        if exec_hash:
            return Outcome(exec_hash, exact_hash=exact, empty=_silent_exec(details, result))
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
    if _is_send_action(tool_name, action, not rules & BUILTIN_SENDS):
        return Outcome(digest(strip_volatile_send_ids(details)))
    if tool_name == "update_plan" and not rules & RAW_UPDATE_PLAN:
        return Outcome(digest({"details": normalize_update_plan(details), "text": ""}))
    text = _text_content(result)
    if is_status_tool(tool_name, rules):
        return _status_outcome(details, text, digest({"details": details, "text": text}))
    return Outcome(digest({"details": details, "text": text}), empty=not details and not text)


def is_status_tool(tool_name: str, rules: int) -> bool:
    """A tool whose results are status reports (status_results.py): ``session_status``
    unless ``maskStatusResults`` is off, or one its ``perTool`` entry names."""
    if rules & STATUS_RESULT:
        return True
    return tool_name in STATUS_TOOLS and not rules & RAW_STATUS_RESULTS


def _status_outcome(details: dict[str, Any] | None, text: str, plain: str) -> Outcome:
    """A status report hashed with its clocks, relative times and counters masked; ``plain``
    (its hash as any other result) is kept as the exact hash for the post-compaction guard,
    which aborts on identical results only, as for masked exec output."""
    masked_text = mask_status_text(text)
    masked = mask_status_value(details) if details is not None else None
    empty = not details and not text
    if masked == details and masked_text == text:
        return Outcome(plain, empty=empty)
    value: Any = {"details": masked, "text": masked_text} if details is not None else masked_text
    return Outcome(digest(value), exact_hash=plain, empty=empty, counters=True)
