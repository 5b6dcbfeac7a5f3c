"""How old events are at each stage of the guarding path, as one histogram with a ``stage`` label
(``loopguard_event_stage_age_seconds``): where an event waits between the broker and its decision.

Stages, in order (an event's age = the stage's wall-clock time - the event's broker timestamp):

* ``fetched``: the consumer's fetch returned it (the broker path: the gateway's send, the
  broker, the fetch wait);
* ``handed``: the fetcher had handed that whole fetch to the streams' queues (it fetches again
  only then; a full stream buffer holds it here);
* ``taken``: the guarding agent took it into a batch (it waited in the stream's queue);
* ``decided``: the batch's decisions were made (the batch lock, writer schemas, the detectors);
* ``published``: the agent handed the batch's decisions and watermarks to the producer
  (exactly once with transactional control delivery: their transaction committed).

Cheap by design: one observation per fetch (its oldest events record) and one per batch (its
first event) at each stage, never one per event; the differences between stages' quantiles say
where the time goes, not each event's own path.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import Histogram

STAGES = ("fetched", "handed", "taken", "decided", "published")


class StageAges:
    """Observes the stages of :data:`STAGES` on ``histogram`` (labelled by ``stage``)."""

    def __init__(self, histogram: Histogram) -> None:
        self.children = {stage: histogram.labels(stage=stage) for stage in STAGES}
        self.topic = ""  # the events topic, whose fetched records count (watch_topic)
        self.unhanded: float | None = None  # the last fetch's oldest events record (seconds)

    def watch_topic(self, topic: str) -> None:
        """Count fetched records of ``topic`` only (the events topic)."""
        self.topic = topic

    def observe(self, stage: str, stamp: float | None, now: float | None = None) -> None:
        """One observation of ``stage``: ``now`` - ``stamp`` (epoch seconds; a clock ahead of
        the gateway's counts 0; no stamp, nothing)."""
        if stamp is None:
            return
        age = (time.time() if now is None else now) - stamp
        self.children[stage].observe(age if age > 0.0 else 0.0)

    def fetched(self, records: Mapping[Any, Sequence[Any]]) -> None:
        """A fetch returned ``records`` (aiokafka's, per topic partition, timestamps in ms):
        its oldest first record of the events topic is observed as ``fetched`` and kept for
        ``handed``."""
        oldest: int | None = None
        for tp, batch in records.items():
            if batch and tp.topic == self.topic:
                stamp = batch[0].timestamp
                if stamp is not None and (oldest is None or stamp < oldest):
                    oldest = stamp
        if oldest is not None:
            now = time.time()
            self.observe("fetched", oldest / 1000, now)
            self.unhanded = oldest / 1000

    def fetching(self) -> None:
        """The fetcher asks for more: the last fetch's records are all with the streams."""
        if self.unhanded is not None:
            self.observe("handed", self.unhanded)
            self.unhanded = None
