"""How often each producer may make a worker look up an unknown writer schema (issue 40).

A lookup reads the schemas topic on the guard path, so an event with an unknown id makes
every event behind it wait; a producer that sends unknown ids by the thousand (or publishes
schemas by the thousand between them) must not hold another gateway's abort. Each producer
(the gateway its events name, :mod:`streams.wire.envelope_peek`) has a token bucket, and the
fleet one more that bounds them all: a producer that invents gateway ids still spends the
fleet's. A lookup refused is no lookup: its event is dead-lettered as an unknown schema
(replayable once the schema is known), and the next lookup within quota finds the schema.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

# Per producer: 3 lookups at once, then one every 2 s. The fleet: 10 at once, then 5 a
# second. Producers remembered: the 10,000 most recent (one forgotten starts full again).
PRODUCER_BURST = 3.0
PRODUCER_PER_SECOND = 0.5
FLEET_BURST = 10.0
FLEET_PER_SECOND = 5.0
MAX_PRODUCERS = 10_000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float  # monotonic seconds of the last refill

    def take(self, burst: float, per_second: float, now: float) -> bool:
        self.tokens = min(burst, self.tokens + (now - self.at) * per_second)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class LookupQuota:
    """Token buckets per producer and for the fleet; not locked (the caller holds one)."""

    def __init__(
        self,
        producer_burst: float = PRODUCER_BURST,
        producer_per_second: float = PRODUCER_PER_SECOND,
        fleet_burst: float = FLEET_BURST,
        fleet_per_second: float = FLEET_PER_SECOND,
        max_producers: int = MAX_PRODUCERS,
    ) -> None:
        self.producer_burst, self.producer_per_second = producer_burst, producer_per_second
        self.fleet_burst, self.fleet_per_second = fleet_burst, fleet_per_second
        self.max_producers = max(int(max_producers), 1)
        self.fleet = _Bucket(fleet_burst, time.monotonic())
        self.producers: OrderedDict[str, _Bucket] = OrderedDict()
        self.refused = 0

    def take(self, producer: str) -> bool:
        """Spend one lookup of ``producer`` (and of the fleet); False when either is spent."""
        now = time.monotonic()
        bucket = self.producers.get(producer)
        if bucket is None:
            bucket = self.producers[producer] = _Bucket(self.producer_burst, now)
            while len(self.producers) > self.max_producers:
                self.producers.popitem(last=False)
        else:
            self.producers.move_to_end(producer)
        allowed = bucket.take(self.producer_burst, self.producer_per_second, now) and (
            self.fleet.take(self.fleet_burst, self.fleet_per_second, now)
        )
        if not allowed:
            self.refused += 1
        return allowed
