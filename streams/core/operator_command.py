"""An operator's command to one run (issue 43): release it (warnings only for a while) or
abort it, as published on the events topic and written in export files. Plain data, shipped
with the gateway client too (a gateway that holds a blocked call publishes its
``holdDefault``); the core applies it in operator_release.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.events import Envelope

RELEASE, ABORT = "release", "abort"
COMMANDS = (RELEASE, ABORT)
COMMAND_KIND = "operator_command"
RUN_SCOPE = "run"  # a command sent for its one run (not for every run of its agent)
# How many calls a release covers when it does not say (``loopguard release``, a hold's
# holdDefault "release").
DEFAULT_RELEASE_CALLS = 10  # its ``kind`` in export files


@dataclass(frozen=True, slots=True)
class OperatorCommand:
    """Release or abort one run. ``envelope.seq`` is 0 (not one of the run's events);
    ``envelope.event_time`` is when the operator sent it. ``scope`` says whether it was sent
    for the run or for all its agent's runs (``--agent``), ``source`` from where (cli, web,
    hold)."""

    envelope: Envelope
    command: str
    release_id: str
    calls: int | None = None
    until: int | None = None  # epoch ms, event time
    reason: str = ""
    released_by: str = ""
    scope: str = RUN_SCOPE
    source: str = "cli"


def command_to_dict(command: OperatorCommand) -> dict[str, Any]:
    """The export-file form: ``kind`` plus the envelope and the command's fields, flat."""
    env = command.envelope
    data: dict[str, Any] = {
        "kind": COMMAND_KIND,
        "run_id": env.run_id,
        "agent_id": env.agent_id,
        "gateway_id": env.gateway_id,
        "seq": env.seq,
        "event_time": env.event_time,
    }
    if env.session_id:
        data["session_id"] = env.session_id
    data.update(
        command=command.command,
        release_id=command.release_id,
        calls=command.calls,
        until=command.until,
        reason=command.reason,
        released_by=command.released_by,
        scope=command.scope,
        source=command.source,
    )
    return data


def command_from_dict(data: dict[str, Any]) -> OperatorCommand:
    """Inverse of :func:`command_to_dict`; raises ``ValueError`` naming what is wrong."""
    name = data.get("command")
    if name not in COMMANDS:
        raise ValueError(f"unknown operator command {name!r} (release or abort)")
    run_id = data.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("missing run_id")
    envelope = Envelope(
        run_id=run_id,
        agent_id=str(data.get("agent_id") or ""),
        gateway_id=str(data.get("gateway_id") or ""),
        seq=0,
        event_time=int(data.get("event_time") or 0),
        session_id=data.get("session_id") or None,
    )
    calls, until = data.get("calls"), data.get("until")
    return OperatorCommand(
        envelope=envelope,
        command=str(name),
        release_id=str(data.get("release_id") or ""),
        calls=None if calls is None else int(calls),
        until=None if until is None else int(until),
        reason=str(data.get("reason") or ""),
        released_by=str(data.get("released_by") or ""),
        scope=str(data.get("scope") or RUN_SCOPE),
        source=str(data.get("source") or "cli"),
    )
