"""The worker's garbage collector, tuned for a process that makes many short-lived objects
per event and keeps a large, long-lived start-up heap.

A full (generation 2) collection walks every tracked object. Once a worker has started,
about 150,000 of them are Faust's, aiokafka's, SQLAlchemy's and fastavro's, alive for the
process's life, and each full collection paused the worker 75–115 ms on a 2-core machine:
the tail of the decision latency. :func:`freeze_start_up_objects` runs once, when table
recovery has finished, and moves them to the collector's permanent generation
(``gc.freeze``); the objects made after it (run states, batches) are collected as before.
:func:`tune_collector` lets 20,000 objects (not 700) accumulate before a young collection,
so a batch's objects mostly die by reference counting before any collection looks at them.
On the tansu throughput benchmark the freeze took 14–16% off the worker's CPU per event and
the threshold another 5–15% (docs/benchmarks-history.md, "The worker's garbage collector").
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("loopguard.worker")

YOUNG_COLLECTION_THRESHOLD = 20_000  # allocations between young collections (CPython: 700)


def tune_collector() -> None:
    """Collect the young generation less often; the older generations' ratios stay."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle, old)


async def freeze_start_up_objects() -> None:
    """Collect once, then freeze what survived: Faust runs app tasks after recovery."""
    gc.collect()
    gc.freeze()
    log.info(
        "froze %d start-up objects out of the garbage collector's scans", gc.get_freeze_count()
    )
