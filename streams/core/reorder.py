"""The bounds on how long a run's out-of-order events wait for a gap before them to fill, so
one lost event cannot stall a run (streams.core.run_state applies them).
"""

from __future__ import annotations

from streams.core.events import AgentEvent

# Out-of-order events wait for the gap before them to fill. The wait is bounded so one lost
# event cannot stall a run: once more than REORDER_LIMIT events wait, or the waiting events
# span REORDER_MAX_WAIT_MS of event time (newest waiting event_time minus that of the first
# event after the gap), the gap is given up on and the run moves on from the lowest waiting
# seq. Measured on event time, the same events in the same order give the same decisions in
# a worker and in replay, however fast either reads them.
REORDER_LIMIT = 64
REORDER_MAX_WAIT_MS = 5_000
# ... and past this many payload characters waiting, so the state (written to the changelog as
# one message) stays well under the broker's request size whatever the events carry.
REORDER_MAX_CHARS = 262_144


def payload_chars(event: AgentEvent) -> int:
    """Rough size of what an event would add to the serialised state."""
    size = 0
    for name in ("args_json", "result_json", "error"):
        value = getattr(event, name, None)
        if value:
            size += len(value)
    return size


def waiting_chars(waiting: dict[int, AgentEvent]) -> int:
    """Rough size of what the waiting events add to the serialised state."""
    return sum(payload_chars(event) for event in waiting.values())


def gap_expired(waiting: dict[int, AgentEvent]) -> bool:
    """Whether the events waiting behind a gap (``waiting``, by seq, not empty) have waited
    long enough (see above)."""
    if len(waiting) > REORDER_LIMIT:
        return True
    first = waiting[min(waiting)].envelope.event_time
    newest = max(event.envelope.event_time for event in waiting.values())
    if newest - first >= REORDER_MAX_WAIT_MS:
        return True
    return waiting_chars(waiting) > REORDER_MAX_CHARS
