"""Replay of loop incidents (issue 28): the same signals the worker forwards, through the same
pure steps (:mod:`streams.core.incidents`), so replay finds the incidents the worker recorded.

The worker sees a failed result on the events topic and a decision on the control topic, each
re-keyed by signature; a signature's signals reach one partition roughly in the order they
happened. Replay keeps the signals aside and applies them at the end in event-time order (a
failure before the decisions of the same event, run id and seq breaking ties). Within a
window the order changes nothing (the counts are sets); an incident still open at the end of
the input is closed only if its quiet window ended by ``until`` (default: the newest event
time read), as the worker closes it once its clock passes that window.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streams.core.events import AgentEvent, Decision, ToolResult
from streams.core.incident_config import IncidentConfig
from streams.core.incidents import Incident, IncidentBook, Signal, decision_signal, failure_signal

FAILURE, DECISION = 0, 1


class IncidentSignals:
    """Signals in the order replay applies them."""

    def __init__(self) -> None:
        self.keyed: list[tuple[tuple[int, int, str, int], Signal]] = []
        self.newest = 0

    def event(self, event: AgentEvent) -> None:
        env = event.envelope
        self.newest = max(self.newest, env.event_time)
        if isinstance(event, ToolResult) and (signal := failure_signal(event)):
            self.keyed.append(((env.event_time, FAILURE, env.run_id, env.seq), signal))

    def decisions(self, decisions: Iterable[Decision]) -> None:
        for d in decisions:
            if signal := decision_signal(d):
                self.keyed.append(((d.event_time, DECISION, d.run_id, d.seq), signal))

    def ordered(self) -> list[Signal]:
        return [signal for _, signal in sorted(self.keyed, key=lambda pair: pair[0])]


def replay_incidents(
    config: IncidentConfig, signals: Iterable[Signal], until: int | None = None
) -> list[Incident]:
    """The incidents ``signals`` open, each in its latest state (open, or closed by ``until``)."""
    book = IncidentBook(config)
    for signal in signals:
        book.observe(signal)
    if until is not None:
        book.close_due(until)
    return book.incidents()


def incidents_of(
    config: IncidentConfig,
    events: Iterable[AgentEvent],
    decisions: Iterable[Decision],
    until: int | None = None,
) -> list[Incident]:
    """Replay's incidents from events and the decisions replay made of them."""
    signals = IncidentSignals()
    for event in events:
        signals.event(event)
    signals.decisions(decisions)
    return replay_incidents(config, signals.ordered(), signals.newest if until is None else until)


class WithIncidents:
    """A replay guard (``LoopGuard``, possibly with agent cycles) that also keeps the incident
    signals of what it reads and decides; everything else is the wrapped guard's."""

    def __init__(self, guard: Any, config: IncidentConfig) -> None:
        self.guard = guard
        self.config = config
        self.signals = IncidentSignals()

    def process(self, event: AgentEvent) -> list[Decision]:
        self.signals.event(event)
        decisions = self.guard.process(event)
        self.signals.decisions(decisions)
        return decisions

    def finish(self) -> list[Decision]:
        decisions = self.guard.finish() if hasattr(self.guard, "finish") else []
        self.signals.decisions(decisions)
        return decisions

    def incidents(self, until: int | None = None) -> list[Incident]:
        """The incidents of everything read so far (none when the config has them off)."""
        if not self.config.enabled:
            return []
        end = self.signals.newest if until is None else until
        return replay_incidents(self.config, self.signals.ordered(), end)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.guard, name)


def with_incidents(guard: Any, config: IncidentConfig) -> WithIncidents:
    return WithIncidents(guard, config)
