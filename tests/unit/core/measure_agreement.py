"""How often loopguard's verdicts agree with the reference's over the agreement test's
generated runs, as shipped and under ``compat: "openclaw"`` (the figures in
docs/openclaw-compat.md). Not a test: run ``python tests/unit/core/measure_agreement.py [N]``
from the repository root (N runs, derandomized: the same figures every time)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(TESTS), str(TESTS.parent)]

from core_helpers import loop_guard  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from unit.core.agreement_streams import streams  # noqa: E402
from unit.core.test_reference_agreement import (  # noqa: E402
    CONFIGS,
    agreement,
    compat_guard,
    reference_run,
)

from streams.core.engine import LoopGuard  # noqa: E402

OBSERVE = 'compat: "openclaw", mode: "observe" (no vetoes: every blocked call runs)'


def measure(runs: int) -> dict[str, tuple[int, int]]:
    """Config name -> (events compared, events agreeing) over ``runs`` generated runs (and
    as many again with no vetoes for observe mode)."""
    fleets = {
        'compat: "openclaw"': [compat_guard(block).fleet for block in CONFIGS],
        "as shipped": [loop_guard(**block).fleet for block in CONFIGS],
    }
    observing = [compat_guard({**block, "mode": "observe"}).fleet for block in CONFIGS]
    totals = dict.fromkeys([*fleets, OBSERVE], (0, 0))

    def add(name: str, compared: int, agreed: int) -> None:
        totals[name] = (totals[name][0] + compared, totals[name][1] + agreed)

    @settings(max_examples=runs, deadline=None, database=None, derandomize=True)
    @given(st.integers(0, len(CONFIGS) - 1), streams(reference_only=True))
    def feed(ci, events):
        wants = reference_run(CONFIGS[ci], events)
        for name, per_config in fleets.items():
            add(name, *agreement(LoopGuard(per_config[ci]), events, wants))

    @settings(max_examples=runs, deadline=None, database=None, derandomize=True)
    @given(st.integers(0, len(CONFIGS) - 1), streams(reference_only=True, vetoes=False))
    def observe(ci, events):
        add(
            OBSERVE,
            *agreement(LoopGuard(observing[ci]), events, reference_run(CONFIGS[ci], events)),
        )

    feed()
    observe()
    return totals


if __name__ == "__main__":
    logging.disable(logging.WARNING)  # the configs' unreachable-threshold warnings
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for name, (compared, agreed) in measure(runs).items():
        print(f"{name}: {agreed:,} of {compared:,} events agree ({100 * agreed / compared:.2f}%)")
