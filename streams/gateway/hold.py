"""Hold instead of fail (issue 43), the gateway's side: a block whose decision says
``on_block: "hold"`` (the agent's config, streams.core.hold) is held, up to its
``hold_timeout_seconds``, for an operator's release or abort of the run on the control topic
(``loopguard release``, the run page's buttons, the webhook's links); with no answer in time
the gateway publishes the agent's ``hold_default`` (refuse, abort or release) as an operator
command of its own (source ``hold``), so the audit trail and replay see what happened."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from streams.core.events import ABORT_DETECTOR, RELEASE_DETECTOR, Decision, Envelope
from streams.core.operator_command import ABORT, DEFAULT_RELEASE_CALLS, RELEASE, OperatorCommand

REFUSE = "refuse"
OPERATOR_DETECTORS = (RELEASE_DETECTOR, ABORT_DETECTOR)
DEFAULT_ANSWER_WAIT_S = 10.0  # how long a published hold default waits for the worker


@dataclass(frozen=True)
class HoldSettings:
    """How long to hold a blocked call, and what to do when nobody answers."""

    timeout_s: float
    default: str


def hold_settings(block: Decision | None) -> HoldSettings | None:
    """The hold a block asks for (None: refuse it at once, as every block before issue 43)."""
    if block is None or block.extra.get("on_block") != "hold":
        return None
    timeout = block.extra.get("hold_timeout_seconds")
    default = block.extra.get("hold_default")
    seconds = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else 300.0
    return HoldSettings(seconds, default if default in (REFUSE, ABORT, RELEASE) else REFUSE)


def operator_answer(decisions: list[Decision], since: int) -> Decision | None:
    """The first release or abort of the run among ``decisions[since:]``."""
    for decision in decisions[since:]:
        if decision.detector in OPERATOR_DETECTORS and decision.enforced:
            return decision
    return None


def default_command(
    block: Decision, settings: HoldSettings, gateway_id: str, session_id: str | None
) -> OperatorCommand:
    """The command a gateway publishes when nobody answered its hold in time."""
    envelope = Envelope(
        block.run_id, block.agent_id, gateway_id, 0, int(time.time() * 1000), session_id
    )
    return OperatorCommand(
        envelope,
        settings.default,
        uuid.uuid4().hex,
        calls=DEFAULT_RELEASE_CALLS if settings.default == RELEASE else None,
        until=None,
        reason=f"no answer within {settings.timeout_s:.0f} s of holding a blocked call "
        f"({block.detector}): holdDefault {settings.default}",
        released_by=f"gateway {gateway_id}",
        source="hold",
    )
