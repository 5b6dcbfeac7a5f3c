"""A straightforward re-statement of the reference runtime's loop rules, for property tests.

Restated from OpenClaw's ``src/agents/tool-loop-detection.ts`` (the build whose detector
honours the configured thresholds), ``pi-embedded-runner/post-compaction-loop-guard.ts`` and
the runner code around them: detection runs on a tool call against the history before it, the
call is then recorded; a result with a hash is recorded on the newest matching call that has
none (or appended) and fed to the post-compaction guard; every compaction retry arms the guard.
Written for obviousness, not speed: every question walks the whole history, as the reference
does, and nothing here is shared with ``streams.core``.

The model runs in two modes (``Config.loopguard``). With it false the model is the reference
alone: every rule marked "loopguard:" below is skipped, and what it does is what loopguard must
do under ``compat: "openclaw"`` (issue 29), event by event, blocks included (a blocked call the
gateway vetoes is never recorded; one that runs anyway is, at call time, issue 38). With it true
(the default) the model restates loopguard's deliberate deviations (README, "Deliberate
deviations") that the generated streams reach, each marked "loopguard:" where it applies: one
counting convention (ping-pong counts the earlier calls of the alternation, like every other
detector); a breaker that counts a stable ping-pong too; the failure rules
(``consecutiveErrors``, ``errorRepeat``); the post-compaction guard's count carried over a
re-arm and the compaction storm; a result that omits its args taking its call's (by call id
while the call is in the window, or the tool's newest open call when it has no id either); bare
results (an exec output string, an object with neither ``details`` nor ``content``),
``*_send`` tools as sends and a call's identity without its execution knobs (issue 44). The
deviations it does not restate (exec output masking, ``update_plan`` shapes, a block recorded
as an outcome, escalation to abort, status results masked) the default-mode comparison keeps
out of its streams.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any


class _Undefined:
    """JavaScript's ``undefined`` (absent fields, absent results)."""

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED = _Undefined()


# -- JSON as JavaScript sees it ------------------------------------------------------------


def js_parse(text: str) -> Any:
    """JSON.parse: every number is a double."""
    return json.loads(text, parse_int=float, parse_float=float)


def js_number(value: float) -> str:
    """Number::toString from the ECMAScript spec: the shortest digits that read back as the
    value (found by trying 1 to 17 significant digits), then placed by the spec's cases."""
    if math.isnan(value) or math.isinf(value):
        return "null"  # JSON.stringify
    if value == 0:
        return "0"
    if value < 0:
        return "-" + js_number(-value)
    for digits in range(1, 18):
        text = f"{value:.{digits - 1}e}"
        if float(text) == value:
            break
    mantissa, exponent = text.split("e")
    s = mantissa.replace(".", "").rstrip("0") or "0"
    k = len(s)
    n = int(exponent) + 1  # value = 0.s * 10**n
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    sign = "+" if e >= 0 else "-"
    return (s if k == 1 else s[0] + "." + s[1:]) + "e" + sign + str(abs(e))


def stable_stringify(value: Any) -> str:
    """The reference's stableStringify: JSON.stringify with object keys sorted."""
    if value is UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float | int):
        return js_number(float(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(stable_stringify(item) for item in value) + "]"
    keys = sorted(value, key=lambda k: k.encode("utf-16-be"))  # JS sorts UTF-16 code units
    return (
        "{"
        + ",".join(
            json.dumps(k, ensure_ascii=False) + ":" + stable_stringify(value[k]) for k in keys
        )
        + "}"
    )


def digest(value: Any) -> str:
    return hashlib.sha256(stable_stringify(value).encode("utf-8")).hexdigest()


def is_plain_object(value: Any) -> bool:
    return isinstance(value, dict)


# String.prototype.trim: WhiteSpace (TAB, VT, FF, SP, NBSP, ZWNBSP and category Zs) and
# LineTerminator (LF, CR, LS, PS)
JS_TRIMMED = "\t\v\f \u00a0\ufeff\u1680\u202f\u205f\u3000\n\r\u2028\u2029" + "".join(
    chr(c) for c in range(0x2000, 0x200B)
)


def js_trim(text: str) -> str:
    return text.strip(JS_TRIMMED)


# -- hashing (tool-loop-detection.ts) ------------------------------------------------------


def hash_tool_call(tool_name: str, params: Any, loopguard: bool = False) -> str:
    return f"{tool_name}:{digest(call_identity(tool_name, params) if loopguard else params)}"


# loopguard (issue 44): the args that change how a call runs, not what it does
EXECUTION_KNOBS = {
    "exec": {"background", "pty", "timeout", "timeoutSeconds", "title", "yieldMs"},
    "process": {"timeout"},
}


def call_identity(tool_name: str, params: Any) -> Any:
    """loopguard: the params without the tool's execution knobs; an exec workdir that names
    the default directory ("", ".", "./") is none, and one directory has one spelling."""
    if not is_plain_object(params) or tool_name not in EXECUTION_KNOBS:
        return params
    kept = {k: v for k, v in params.items() if k not in EXECUTION_KNOBS[tool_name]}
    workdir = kept.get("workdir")
    if tool_name == "exec" and isinstance(workdir, str):
        parts = [part for part in workdir.split("/") if part not in ("", ".")]
        spelled = ("/" if workdir.startswith("/") else "") + "/".join(parts)
        if spelled:
            kept["workdir"] = spelled
        else:
            del kept["workdir"]
    return kept


def is_known_poll_tool_call(tool_name: str, params: Any) -> bool:
    if tool_name == "command_status":
        return True
    if tool_name != "process" or not is_plain_object(params):
        return False
    return params.get("action") in ("poll", "log")


def extract_text_content(result: Any) -> str:
    if not is_plain_object(result) or not isinstance(result.get("content"), list):
        return ""
    texts = [
        entry["text"]
        for entry in result["content"]
        if is_plain_object(entry)
        and isinstance(entry.get("type"), str)
        and isinstance(entry.get("text"), str)
    ]
    return js_trim("\n".join(texts))


def extract_unknown_tool_name(error: str) -> str | None:
    raw = js_trim(error)
    if not raw:
        return None
    match = re.search(r"unknown tool[:\s]+[\"']?([a-z0-9_.-]+)[\"']?", raw, re.I) or re.search(
        r"tool\s+[\"']?([a-z0-9_.-]+)[\"']?\s+(?:not found|is not available)", raw, re.I
    )
    name = match.group(1).strip() if match else ""
    return name.lower() if name else None


def string_field(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def non_empty_string_field(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    trimmed = js_trim(value)
    return trimmed or None


def get(obj: dict[str, Any], key: str) -> Any:
    return obj.get(key, UNDEFINED)


def nullish(value: Any) -> Any:
    """``value ?? null``"""
    return None if value is UNDEFINED or value is None else value


def hash_exec_tool_outcome(details: dict[str, Any], text: str) -> str | None:
    status = string_field(get(details, "status"))
    if not status:
        return None
    if status == "running":
        return digest({"status": status, "tail": string_field(get(details, "tail")) or ""})
    if status in ("completed", "failed"):
        exit_code = get(details, "exitCode")
        number = isinstance(exit_code, float | int) and not isinstance(exit_code, bool)
        return digest(
            {
                "status": status,
                "exitCode": exit_code if number else None,
                "timedOut": get(details, "timedOut") is True,
                "output": non_empty_string_field(get(details, "aggregated")) or text,
            }
        )
    if status in ("approval-pending", "approval-unavailable"):
        return digest(
            {
                "status": status,
                "reason": string_field(get(details, "reason")),
                "host": string_field(get(details, "host")),
                "command": string_field(get(details, "command")) or "",
                "warningText": string_field(get(details, "warningText")) or "",
            }
        )
    return None


SEND_LIKE_MESSAGE_ACTIONS = {
    *("send", "broadcast", "reply", "thread-reply", "sendWithEffect", "sendAttachment"),
    *("upload-file", "sticker", "poll"),
}
VOLATILE_SEND_RESULT_KEYS = {
    *("messageId", "message_id", "messageIds", "platformMessageId", "platformMessageIds"),
    *("fileId", "file_id", "fileKey", "pollId", "poll_id", "receipt", "runId"),
    *("idempotencyKey", "ts", "timestamp", "sentAt", "deliveredAt", "createdAt"),
}


def is_message_delivery_object(value: dict[str, Any]) -> bool:
    return (
        isinstance(get(value, "id"), str)
        and isinstance(get(value, "text"), str)
        and (
            isinstance(get(value, "direction"), str)
            or isinstance(get(value, "senderId"), str)
            or isinstance(get(value, "accountId"), str)
            or is_plain_object(get(value, "conversation"))
        )
    )


def strip_volatile_send_ids(value: Any) -> Any:
    if isinstance(value, list):
        return [strip_volatile_send_ids(item) for item in value]
    if not is_plain_object(value):
        return value
    drop_id = is_message_delivery_object(value)
    return {
        key: strip_volatile_send_ids(nested)
        for key, nested in value.items()
        if key not in VOLATILE_SEND_RESULT_KEYS and not (key == "id" and drop_id)
    }


def is_messaging_tool_send_action(tool_name: str, args: dict[str, Any], loopguard: bool) -> bool:
    # embedded-agent-messaging.ts; channel plugins (telegram, slack, ...) are asked there
    if tool_name in ("sessions_send", "conversations_send", "conversations_turn"):
        return True
    if not loopguard:  # the reference with no channel plugin installed
        return False
    # loopguard: a worker cannot ask the plugins; it goes by the tool's name (README)
    action = args.get("action")
    return tool_name.endswith("_send") or (
        tool_name.endswith("_message")
        and isinstance(action, str)
        and action in SEND_LIKE_MESSAGE_ACTIONS
    )


def is_volatile_send_result(tool_name: str, params: Any, loopguard: bool) -> bool:
    if tool_name == "sessions_send":
        return True
    args = params if is_plain_object(params) else {}
    if tool_name == "message":
        action = args.get("action")
        return isinstance(action, str) and action in SEND_LIKE_MESSAGE_ACTIONS
    return is_messaging_tool_send_action(tool_name, args, loopguard)


def hash_tool_outcome(
    tool_name: str, params: Any, result: Any, error: str | None, loopguard: bool = True
) -> tuple[str | None, str | None]:
    """(resultHash, unknownToolName)"""
    if error is not None:
        return f"error:{digest(error)}", extract_unknown_tool_name(error)
    if not is_plain_object(result):
        if tool_name == "exec" and isinstance(result, str) and loopguard:  # the bare output
            return digest({"output": js_trim(result)}), None
        return (None if result is UNDEFINED else digest(result)), None
    if is_plain_object(get(result, "details")):
        details = result["details"]
    elif "details" in result or "content" in result or not loopguard:
        details = {}
    else:  # loopguard: a bare result object is its own details
        details = result
    text = extract_text_content(result)
    if tool_name == "exec":
        exec_hash = hash_exec_tool_outcome(details, text)
        if exec_hash:
            return exec_hash, None
    if is_known_poll_tool_call(tool_name, params) and tool_name == "process":
        action = params["action"]
        if action == "poll":
            return digest(
                {
                    "action": action,
                    "status": get(details, "status"),
                    "exitCode": nullish(get(details, "exitCode")),
                    "exitSignal": nullish(get(details, "exitSignal")),
                    "aggregated": nullish(get(details, "aggregated")),
                    "text": text,
                }
            ), None
        if action == "log":
            return digest(
                {
                    "action": action,
                    "status": get(details, "status"),
                    "totalLines": nullish(get(details, "totalLines")),
                    "totalChars": nullish(get(details, "totalChars")),
                    "truncated": nullish(get(details, "truncated")),
                    "exitCode": nullish(get(details, "exitCode")),
                    "exitSignal": nullish(get(details, "exitSignal")),
                    "text": text,
                }
            ), None
    if is_volatile_send_result(tool_name, params, loopguard):
        return digest(strip_volatile_send_ids(details)), None
    return digest({"details": details, "text": text}), None


# -- detection (tool-loop-detection.ts) ----------------------------------------------------


@dataclass
class Record:
    tool_name: str
    args_hash: str
    tool_call_id: str | None
    result_hash: str | None = None
    unknown_tool_name: str | None = None
    params: Any = None  # what the gateway called it with


@dataclass
class Config:
    enabled: bool | None
    history_size: int
    warning: int
    critical: int
    unknown_tool: int
    breaker: int
    generic_repeat: bool
    known_poll: bool
    ping_pong: bool
    window: int
    storm_threshold: int = 3  # loopguard: compaction storm
    # loopguard's failure rules (issue 17)
    consecutive_errors: bool = True
    error_repeat: bool = True
    errors_warning: int = 5
    errors_critical: int = 10
    error_repeat_threshold: int = 4
    # False: the reference alone, none of loopguard's rules (compat: "openclaw")
    loopguard: bool = True

    @classmethod
    def from_block(cls, block: dict[str, Any], loopguard: bool = True) -> Config:
        """resolveLoopDetectionConfig + the guard's window (positive ints; clamped upwards);
        ``loopguard`` false: the reference's config, loopguard's own rules off."""
        warning = block.get("warningThreshold", 10)
        critical = max(block.get("criticalThreshold", 20), warning + 1)
        breaker = max(block.get("globalCircuitBreakerThreshold", 30), critical + 1)
        detectors = block.get("detectors", {})
        errors = block.get("consecutiveErrors", {})
        errors_warning = errors.get("warningThreshold", 5)
        return cls(
            enabled=block.get("enabled"),
            history_size=block.get("historySize", 30),
            warning=warning,
            critical=critical,
            unknown_tool=block.get("unknownToolThreshold", 10),
            breaker=breaker,
            generic_repeat=detectors.get("genericRepeat", True),
            known_poll=detectors.get("knownPollNoProgress", True),
            ping_pong=detectors.get("pingPong", True),
            window=block.get("postCompactionGuard", {}).get("windowSize", 3),
            storm_threshold=block.get("postCompactionGuard", {}).get("stormThreshold", 3),
            consecutive_errors=detectors.get("consecutiveErrors", True) and loopguard,
            error_repeat=detectors.get("errorRepeat", True) and loopguard,
            errors_warning=errors_warning,
            errors_critical=max(errors.get("criticalThreshold", 10), errors_warning + 1),
            error_repeat_threshold=block.get("errorRepeatThreshold", 4),
            loopguard=loopguard,
        )


def unknown_tool_repeat_streak(history: list[Record], tool_name: str) -> tuple[int, str | None]:
    streak, name = 0, None
    for record in reversed(history):
        if record.tool_name != tool_name or not record.unknown_tool_name:
            break
        if name is None:
            name, streak = record.unknown_tool_name, 1
            continue
        if record.unknown_tool_name != name:
            break
        streak += 1
    return streak, name


def no_progress_streak(history: list[Record], tool_name: str, args_hash: str) -> int:
    streak, latest = 0, None
    for record in reversed(history):
        if record.tool_name != tool_name or record.args_hash != args_hash:
            continue
        if not record.result_hash:
            continue
        if latest is None:
            latest, streak = record.result_hash, 1
            continue
        if record.result_hash != latest:
            break
        streak += 1
    return streak


def ping_pong_streak(history: list[Record], current: str) -> tuple[int, bool]:
    """(count, noProgressEvidence)"""
    if not history:
        return 0, False
    last = history[-1]
    other = next((r for r in reversed(history[:-1]) if r.args_hash != last.args_hash), None)
    if other is None:
        return 0, False
    tail = 0
    for record in reversed(history):
        expected = last.args_hash if tail % 2 == 0 else other.args_hash
        if record.args_hash != expected:
            break
        tail += 1
    if tail < 2 or current != other.args_hash:
        return 0, False
    first_a = first_b = None
    evidence = True
    for record in history[len(history) - tail :]:
        if not record.result_hash:
            evidence = False
            break
        if record.args_hash == last.args_hash:
            if first_a is None:
                first_a = record.result_hash
            elif first_a != record.result_hash:
                evidence = False
                break
            continue
        if record.args_hash == other.args_hash:
            if first_b is None:
                first_b = record.result_hash
            elif first_b != record.result_hash:
                evidence = False
                break
            continue
        evidence = False
        break
    if first_a is None or first_b is None:
        evidence = False
    return tail + 1, evidence


Verdict = tuple[str, str, int]  # (level, detector, count)
# What a gateway reports for a call the loop detector vetoed (the generated streams send it
# only in reference_only streams, as its one JSON text).
VETO_JSON = json.dumps({"details": {"status": "blocked", "deniedReason": "tool-loop"}})


def detect_tool_call_loop(
    history: list[Record], tool_name: str, params: Any, cfg: Config
) -> Verdict | None:
    if cfg.enabled is not True:
        return None
    current = hash_tool_call(tool_name, params, cfg.loopguard)
    unknown, _ = unknown_tool_repeat_streak(history, tool_name)
    streak = no_progress_streak(history, tool_name, current)
    known_poll = is_known_poll_tool_call(tool_name, params)
    pong, pong_evidence = ping_pong_streak(history, current)
    if cfg.loopguard:  # loopguard: the current call is not counted (the reference counts it)
        pong = max(pong - 1, 0)
    if unknown >= cfg.unknown_tool:
        return ("critical", "unknown_tool_repeat", unknown)
    # loopguard: the breaker counts a stable ping-pong too (the larger of the two counts)
    breaker = max(streak, pong if pong_evidence else 0) if cfg.loopguard else streak
    if breaker >= cfg.breaker:
        return ("critical", "global_circuit_breaker", breaker)
    if known_poll and cfg.known_poll and streak >= cfg.critical:
        return ("critical", "known_poll_no_progress", streak)
    if known_poll and cfg.known_poll and streak >= cfg.warning:
        return ("warning", "known_poll_no_progress", streak)
    if cfg.ping_pong and pong >= cfg.critical and pong_evidence:
        return ("critical", "ping_pong", pong)
    if cfg.ping_pong and pong >= cfg.warning:
        return ("warning", "ping_pong", pong)
    recent = sum(1 for r in history if r.tool_name == tool_name and r.args_hash == current)
    if not known_poll and cfg.generic_repeat and streak >= cfg.critical:
        return ("critical", "generic_repeat", streak)
    if not known_poll and cfg.generic_repeat and recent >= cfg.warning:
        return ("warning", "generic_repeat", recent)
    return None


# -- loopguard: the failure rules (issue 17) -----------------------------------------------


def latest_result_hash(history: list[Record], args_hash: str) -> str | None:
    for record in reversed(history):
        if record.args_hash == args_hash and record.result_hash:
            return record.result_hash
    return None


def detect_failures(
    history: list[Record], tool_name: str, params: Any, cfg: Config, error_streak: int
) -> Verdict | None:
    """errorRepeat: the call's identical-outcome streak is of one error; consecutiveErrors:
    the run's last outcomes were all failures, whatever the calls."""
    if cfg.enabled is not True:
        return None
    current = hash_tool_call(tool_name, params, cfg.loopguard)
    latest = latest_result_hash(history, current)
    if cfg.error_repeat and latest is not None and latest.startswith("error:"):
        streak = no_progress_streak(history, tool_name, current)
        if streak >= cfg.error_repeat_threshold:
            return ("critical", "error_repeat", streak)
    if cfg.consecutive_errors and error_streak >= cfg.errors_critical:
        return ("critical", "consecutive_errors", error_streak)
    if cfg.consecutive_errors and error_streak >= cfg.errors_warning:
        return ("warning", "consecutive_errors", error_streak)
    return None


def detect_all(
    history: list[Record], tool_name: str, params: Any, cfg: Config, error_streak: int
) -> Verdict | None:
    """The most severe verdict; at equal severity the reference's own comes first."""
    verdict = detect_tool_call_loop(history, tool_name, params, cfg)
    if verdict is not None and verdict[0] == "critical":
        return verdict
    extra = detect_failures(history, tool_name, params, cfg, error_streak)
    if extra is not None and (verdict is None or extra[0] == "critical"):
        return extra
    return verdict


# -- one run: the runner around detection and the post-compaction guard --------------------


@dataclass
class ReferenceRun:
    cfg: Config
    history: list[Record] = field(default_factory=list)
    guard_remaining: int = 0
    guard_history: list[tuple[str, str, str]] = field(default_factory=list)
    error_streak: int = 0  # loopguard: failed outcomes in a row
    guard_carried: bool = False  # loopguard: the window's counts came over a re-arm
    storm_compacted: bool = False  # loopguard: compaction storm
    storm_progressed: bool = False
    storm: int = 0

    def _trim(self) -> None:
        del self.history[: max(0, len(self.history) - self.cfg.history_size)]

    def call(
        self, tool_name: str, args_json: str, call_id: str | None, enforced: bool = True
    ) -> Verdict | None:
        """``enforced``: a block of this call stops it (the gateway vetoes it); a block that
        is not (observe mode, a gateway that lets the call run) leaves it a call that ran."""
        params = js_parse(args_json)
        verdict = detect_all(self.history, tool_name, params, self.cfg, self.error_streak)
        blocked = verdict is not None and verdict[0] == "critical" and not self.cfg.loopguard
        if blocked and enforced:
            return verdict  # runBeforeToolCallHook blocks before recordToolCall
        if self.cfg.enabled is not False:  # recordToolCall
            args_hash = hash_tool_call(tool_name, params, self.cfg.loopguard)
            record = Record(tool_name, args_hash, call_id, params=params)
            self.history.append(record)
            self._trim()
        return verdict

    def result(
        self,
        tool_name: str,
        args_json: str | None,
        result_json: str | None,
        error: str | None,
        call_id: str | None,
    ) -> Verdict | None:
        if not self.cfg.loopguard and result_json == VETO_JSON:
            return None  # a vetoed call records no outcome (its call was never recorded)
        if args_json is None and not self.cfg.loopguard:
            params = None  # the reference hashes the params it is given: none (null) here
        elif args_json is None and not call_id:
            # loopguard: neither args nor id: the tool's newest call without a result, if any
            known = next(
                (
                    r
                    for r in reversed(self.history)
                    if r.tool_name == tool_name and not r.result_hash
                ),
                None,
            )
            if known is None:  # matches nothing: only the failure streak hears of it
                result = UNDEFINED if result_json is None else js_parse(result_json)
                if hash_tool_outcome(tool_name, {}, result, error)[0]:
                    self.error_streak = self.error_streak + 1 if error is not None else 0
                return None
            params = known.params
        elif args_json is None:
            # loopguard's events may omit a result's args when its call id names the call (the
            # reference's gateway always knows them): the call's args, while the call is in
            # the window; a worker knows no args for a call it no longer has
            known = next(
                (r for r in reversed(self.history) if call_id and r.tool_call_id == call_id),
                None,
            )
            params = known.params if known is not None and known.tool_name == tool_name else {}
        else:
            params = js_parse(args_json)
        result = UNDEFINED if result_json is None else js_parse(result_json)
        result_hash, unknown = hash_tool_outcome(
            tool_name, params, result, error, self.cfg.loopguard
        )
        if not result_hash:  # recordToolCallOutcome records nothing, observes nothing
            return None
        # loopguard: the failure streak (the generated gateway never answers with a veto)
        self.error_streak = self.error_streak + 1 if error is not None else 0
        args_hash = hash_tool_call(tool_name, params, self.cfg.loopguard)
        for record in reversed(self.history):
            if call_id and record.tool_call_id != call_id:
                continue
            if record.tool_name != tool_name or record.args_hash != args_hash:
                continue
            if record.result_hash is not None:
                continue
            record.result_hash, record.unknown_tool_name = result_hash, unknown
            target = record
            break
        else:
            target = Record(tool_name, args_hash, call_id, result_hash, unknown, params)
            self.history.append(target)
        self._trim()
        # loopguard: compaction storm progress, an outcome unlike its call's previous one
        if self.storm_compacted and self.cfg.loopguard:
            at = next((i for i, r in enumerate(self.history) if r is target), None)
            earlier = [
                r for r in self.history[: at or 0] if r.args_hash == args_hash and r.result_hash
            ]
            if at is not None and (not earlier or earlier[-1].result_hash != result_hash):
                self.storm_progressed = True
        return self._observe(tool_name, args_hash, result_hash)

    def compaction(self) -> Verdict | None:
        """armPostCompaction, after every compaction retry kind."""
        # loopguard: an open window's counts carry over the re-arm (the next outcome decides)
        self.guard_carried = (
            self.cfg.loopguard and self.guard_remaining > 0 and bool(self.guard_history)
        )
        if not self.guard_carried:
            self.guard_history = []
        self.guard_remaining = self.cfg.window
        if self.cfg.enabled is False or not self.cfg.loopguard:
            return None
        # loopguard: compaction storm, retries in a row with no progress between them
        no_progress = self.storm_compacted and not self.storm_progressed
        self.storm = self.storm + 1 if no_progress else 0
        self.storm_compacted, self.storm_progressed = True, False
        if self.storm >= self.cfg.storm_threshold:
            return ("critical", "compaction_storm", self.storm)
        return None

    def _observe(self, tool_name: str, args_hash: str, result_hash: str) -> Verdict | None:
        if self.cfg.enabled is False or self.guard_remaining <= 0:
            return None
        self.guard_remaining -= 1
        triple = (tool_name, args_hash, result_hash)
        if self.guard_carried:  # loopguard: the loop went on, or the count starts over
            self.guard_carried = False
            if triple not in self.guard_history:
                self.guard_history = []
        self.guard_history.append(triple)
        matches = sum(1 for entry in self.guard_history if entry == triple)
        if matches >= self.cfg.window:
            return ("critical", "post_compaction_guard", matches)
        return None
