"""Plain event and decision types shared by the detector core, the codecs and the storage layer.

These mirror the Avro records in ``schemas/`` field for field, but carry no Kafka or Avro
dependency so the core can be run, replayed and tested on its own.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any


@dataclass(frozen=True, slots=True)
class Envelope:
    """Where an event comes from and where it sits in its run's sequence."""

    run_id: str
    agent_id: str
    gateway_id: str
    seq: int
    event_time: int  # epoch milliseconds, set by the gateway
    # The conversation the run belongs to (issue 17): a compaction can start a new run of the
    # same session, and ``scope: "session"`` carries a loop's counts over to it.
    session_id: str | None = None
    # The conversation cascade the event belongs to across agents (issue 28): a gateway that
    # knows it (an inbound agent-to-agent message carried one) attaches it to the runs it
    # starts and their sends; loops between agents are then judged per chain.
    chain_id: str | None = None


def partition_key(envelope: Envelope) -> str:
    """The events topic's message key: the session id when the run has one (so a session's
    runs share a partition and a worker, issue 17), else the run id."""
    return envelope.session_id or envelope.run_id


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The agent asked for a tool; emitted before the tool runs."""

    envelope: Envelope
    tool_name: str
    args_json: str | None = "{}"  # None (no args at all) hashes as JSON null
    tool_call_id: str | None = None
    # Usage of the model turn that asked for the call (issue 28), on a turn's first call;
    # None where the gateway does not know. Never part of a call's signature.
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    # The assistant turn (message) that asked for the call (issue 44): the parallel calls of
    # one turn share it and are judged as a set (streams.core.bursts); None where the
    # gateway does not know. Never part of a call's signature.
    turn_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool finished (or was refused); ``error`` set means it failed."""

    envelope: Envelope
    tool_name: str
    args_json: str | None = None
    result_json: str | None = None
    error: str | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class CompactionRetry:
    """The runner compacted the context and retried; ``trigger`` says why."""

    envelope: Envelope
    trigger: str = "context_overflow"


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A run began; ``trigger`` says what started it ("user", "heartbeat", "cron",
    "compaction", ...), so session scope can let scheduled runs start fresh."""

    envelope: Envelope
    trigger: str | None = None


@dataclass(frozen=True, slots=True)
class RunEnded:
    """The run ended; the usage fields are its last model turn (the one that asked for no
    tool) or whatever usage the gateway had not sent with a call yet."""

    envelope: Envelope
    status: str = "completed"
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


AgentEvent = ToolCall | ToolResult | CompactionRetry | RunStarted | RunEnded

EVENT_KINDS: dict[str, type] = {
    "tool_call": ToolCall,
    "tool_result": ToolResult,
    "compaction_retry": CompactionRetry,
    "run_started": RunStarted,
    "run_ended": RunEnded,
}
KIND_OF: dict[type, str] = {cls: kind for kind, cls in EVENT_KINDS.items()}
# Optional fields added after the first release: left out of the flat dict while unset, so
# export files and stored states written before them read (and compare) the same.
_OMITTED_WHEN_NONE = (
    "session_id",
    "chain_id",
    "trigger",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "turn_id",
)
USAGE_FIELDS = ("input_tokens", "output_tokens", "cost_usd")


def event_kind(event: AgentEvent) -> str:
    return KIND_OF[type(event)]


def event_to_dict(event: AgentEvent) -> dict[str, Any]:
    """Flat dict form used by codecs, export files and the audit trail."""
    body = asdict(event)
    envelope = body.pop("envelope")
    flat = {"kind": event_kind(event), **envelope, **body}
    for name in _OMITTED_WHEN_NONE:
        if name in flat and flat[name] is None:
            del flat[name]
    return flat


def event_from_dict(data: dict[str, Any]) -> AgentEvent:
    """Inverse of :func:`event_to_dict`; raises ``ValueError`` naming what is wrong."""
    kind = data.get("kind")
    cls = EVENT_KINDS.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}")
    try:
        envelope = Envelope(
            run_id=data["run_id"],
            agent_id=data.get("agent_id") or "",
            gateway_id=data.get("gateway_id") or "",
            seq=int(data["seq"]),
            event_time=int(data.get("event_time") or 0),
            session_id=data.get("session_id") or None,
            chain_id=data.get("chain_id") or None,
        )
    except KeyError as exc:
        raise ValueError(f"missing field {exc.args[0]!r}") from None
    if not isinstance(envelope.run_id, str) or not envelope.run_id:
        raise ValueError("missing run_id")
    names = (f.name for f in fields(cls) if f.name != "envelope")
    return cls(envelope=envelope, **{name: data[name] for name in names if name in data})


# The detectors of an operator's decisions (issue 43, operator_release.py): gateways (whose
# client ships this module alone) lift a pending block on a release and end a held call.
RELEASE_DETECTOR = "operator_release"
ABORT_DETECTOR = "operator_abort"


class Action(StrEnum):
    """What the gateway must do; ordered by severity."""

    WARN = "warn"
    BLOCK = "block"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class Decision:
    """One loop event: what was detected and what the gateway must do about it."""

    run_id: str
    agent_id: str
    gateway_id: str
    seq: int  # sequence number of the event that triggered the decision
    event_time: int
    action: Action
    detector: str
    severity: str  # "warning" | "critical"
    count: int
    tool_name: str
    reason: str
    args_hash: str = ""
    result_hash: str = ""
    paired_tool_name: str = ""
    error_code: str = ""
    config_version: str = ""
    # False when the agent's config is ``mode: "observe"``: gateways log the decision ("would
    # block ...") and never act on it, while the trail and replay keep it like any other.
    enforced: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def decision_id(self) -> str:
        """Stable identity: one decision per (run, triggering event, detector)."""
        return f"{self.run_id}:{self.seq}:{self.detector}:{self.action.value}"

    def to_dict(self) -> dict[str, Any]:
        """Field by field (what ``asdict`` gives, at an eighth of its cost): every state
        write of a looping run converts each decision it keeps."""
        data = {name: getattr(self, name) for name in DECISION_FIELD_NAMES}
        data["action"] = self.action.value
        data["extra"] = copy_extra(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        values["action"] = Action(values["action"])
        values.setdefault("extra", {})
        return cls(**values)


DECISION_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Decision))
_IMMUTABLE_SCALARS = (str, int, float, bool, type(None))


def copy_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """A decision's ``extra`` the caller may change: flat (what the detectors write, e.g.
    ``{"blocks": "3"}``) a plain copy, nested a deep one. Every state write copies each
    decision its run keeps, and ``deepcopy`` costs three times as much as ``dict``."""
    if all(isinstance(value, _IMMUTABLE_SCALARS) for value in extra.values()):
        return dict(extra)
    return copy.deepcopy(extra)
