"""The audit agent's batch of control-topic records: messages in; the decisions and run
watermarks to write, and what was refused, out. No Faust, no I/O (issue 39: the adapter,
:meth:`streams.worker.agents.WorkerAgents.audit_decisions`, moves bytes and writes SQL).

Each record fails alone (issue 40): one that does not decode, whatever the exception (a
Decision whose ``extra`` nested 50,000 lists raised RecursionError and ended every worker,
and each restarted one on the same record), is kept as a dead letter with its error for the
audit trail, and the records after it are read as usual. With gateway keys, a record no
worker signed is set aside with the reason (:func:`streams.wire.signing.check_control`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from streams.core.events import Decision
from streams.service.dead_letter_records import dead_letter_record, failure_text
from streams.service.records import Message
from streams.wire.avro import DeadLetterRecord, RunWatermark, control_messages
from streams.wire.signing import GatewayKeys, check_control


@dataclass
class ControlBatch:
    """What a batch of control records holds for the audit trail."""

    decisions: list[Decision] = field(default_factory=list)
    watermarks: list[RunWatermark] = field(default_factory=list)
    dead_letters: list[DeadLetterRecord] = field(default_factory=list)  # undecodable
    forged: list[tuple[Message, str]] = field(default_factory=list)  # unsigned, and why


def read_control(
    messages: Sequence[Message],
    keys: GatewayKeys | None,
    *,
    now: float,
    max_message_bytes: int,
) -> ControlBatch:
    """Decode each record into the batch's decisions and watermarks; ``now``: wall-clock
    seconds (the dead letters' time)."""
    out = ControlBatch()
    for message in messages:
        value = message.value or b""
        try:
            decoded = control_messages(value)
            refused = ""
            if keys is not None:
                refused = check_control(keys, getattr(message, "headers", None), value, decoded)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the trail
            error = f"undecodable control record: {failure_text(exc)}"
            out.dead_letters.append(dead_letter_record(message, error, max_message_bytes, now))
            continue
        if refused:
            out.forged.append((message, refused))
            continue
        for item in decoded:
            if isinstance(item, Decision):
                out.decisions.append(item)
            else:
                out.watermarks.append(item)
    return out
