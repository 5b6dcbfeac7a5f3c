"""Loop-incident metrics (issue 28), on the worker's own registry (served by ``/metrics``):

=============================================  =========  ==================================
``loopguard_incidents_opened_total``           counter    incidents this worker recorded
                                                          opening (redeliveries excluded)
``loopguard_incidents_open``                   gauge      incidents open on this worker's
                                                          signal partitions (sum the workers)
=============================================  =========  ==================================
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

INCIDENT_METRIC_NAMES = ("loopguard_incidents_opened", "loopguard_incidents_open")


class IncidentMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.opened = Counter(
            "loopguard_incidents_opened",
            "Loop incidents recorded opening (a signature shared by many runs in a window).",
            registry=registry,
        )
        self.open = Gauge(
            "loopguard_incidents_open",
            "Loop incidents open on this worker's incident-signal partitions.",
            registry=registry,
        )

    def recorded_opening(self, n: int) -> None:
        if n > 0:
            self.opened.inc(n)

    def set_open(self, n: int) -> None:
        self.open.set(max(0, n))
