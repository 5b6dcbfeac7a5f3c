"""The decisions of a run's last few deciding events, kept in its state so a redelivered event
can publish its decisions again (same ids) when the first publication was lost in a crash.
"""

from __future__ import annotations

from typing import Any

from streams.core.events import Decision

# How many deciding events a run keeps the decisions of.
RECENT_DECISIONS = 16


def keep_recent(
    recent: list[tuple[int, list[Decision]]], seq: int, decisions: list[Decision]
) -> None:
    """Keep an event's decisions among the last RECENT_DECISIONS deciding events (``recent``,
    oldest first)."""
    recent.append((seq, decisions))
    if len(recent) > RECENT_DECISIONS:
        del recent[0]


def recent_decision_dict(decision: Decision) -> dict[str, Any]:
    """A kept decision as state: ``enforced`` only when false (observe mode), so enforced
    runs write the very bytes they wrote before the field existed; loading defaults it."""
    data = decision.to_dict()
    if decision.enforced:
        del data["enforced"]
    return data
