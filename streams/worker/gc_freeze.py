"""Keep the worker's start-up objects out of the garbage collector's full collections.

A full (generation 2) collection walks every tracked object. Once a worker has started,
about 150,000 of them are Faust's, aiokafka's, SQLAlchemy's and fastavro's, alive for the
process's life, and each full collection paused the worker 75–115 ms on a 2-core machine:
the tail of the decision latency (docs/benchmarks.md, "Start-up objects frozen").
:func:`freeze_start_up_objects` runs once, when table recovery has finished, and moves them
to the collector's permanent generation (``gc.freeze``); the objects made after it (run
states, batches) are collected as before.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("loopguard.worker")


async def freeze_start_up_objects() -> None:
    """Collect once, then freeze what survived: Faust runs app tasks after recovery."""
    gc.collect()
    gc.freeze()
    log.info(
        "froze %d start-up objects out of the garbage collector's scans", gc.get_freeze_count()
    )
