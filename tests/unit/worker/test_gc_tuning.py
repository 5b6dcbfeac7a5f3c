"""The worker's collector: start-up objects leave its full scans once recovery is done, and
young collections come less often."""

from __future__ import annotations

import asyncio
import gc

from streams.worker.gc_tuning import (
    YOUNG_COLLECTION_THRESHOLD,
    freeze_start_up_objects,
    tune_collector,
)


def test_freeze_moves_live_objects_to_the_permanent_generation() -> None:
    survivor = [object() for _ in range(1000)]  # alive across the collection: frozen
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        asyncio.run(freeze_start_up_objects())
        assert gc.get_freeze_count() >= len(survivor)
    finally:
        gc.unfreeze()


def test_young_collections_wait_for_more_allocations_and_older_ratios_stay() -> None:
    before = gc.get_threshold()
    try:
        tune_collector()
        assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, before[1], before[2])
    finally:
        gc.set_threshold(*before)
