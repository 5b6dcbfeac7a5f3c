"""Throughput of the detector core (``LoopGuard.process``) on one core.

The work is in :mod:`bench.lab.core`; ``python -m bench.core_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.core_bench
        from .launch import run
    else:  # python bench/core_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.core")
