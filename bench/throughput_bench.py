"""loopguard's throughput against its baselines, measured side by side in one run.

The work is in :mod:`bench.lab.throughput`; ``python -m bench.throughput_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.throughput_bench
        from .launch import run
    else:  # python bench/throughput_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.throughput")
