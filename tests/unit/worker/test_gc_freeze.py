"""The worker's start-up objects leave the collector's scans once recovery is done."""

from __future__ import annotations

import asyncio
import gc

from streams.worker.gc_freeze import freeze_start_up_objects


def test_freeze_moves_live_objects_to_the_permanent_generation() -> None:
    survivor = [object() for _ in range(1000)]  # alive across the collection: frozen
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        asyncio.run(freeze_start_up_objects())
        assert gc.get_freeze_count() >= len(survivor)
    finally:
        gc.unfreeze()
