"""The guarding path's CPU per event without a broker (``process_batch`` over the throughput
bench's workload).

The work is in :mod:`bench.lab.batch`; ``python -m bench.batch_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.batch_bench
        from .launch import run
    else:  # python bench/batch_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.batch")
