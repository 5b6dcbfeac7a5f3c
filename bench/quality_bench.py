"""Detection quality on real agent trajectories (issue 38): loopguard's core and the peers'
published loop rules replayed over the same imported runs, in one table.

    .venv/bin/loopguard import --format openhands TRAJS --results RESULTS -o corpus.jsonl
    python bench/quality_bench.py corpus.jsonl [MORE ...] [--labels FILE] [--config FILE ...]
                                  [--json]

Also ``python -m bench.quality_bench`` from the repository root. The work is in
``bench/quality/``; docs/detection-quality.md says what each column means.
"""

from __future__ import annotations

import sys

if __package__:  # python -m bench.quality_bench
    from .quality.command import main
else:  # python bench/quality_bench.py: this directory is sys.path[0]
    from quality.command import main

if __name__ == "__main__":
    sys.exit(main())
