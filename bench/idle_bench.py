"""What an idle worker and its broker cost: CPU seconds over a window with no traffic.

The work is in :mod:`bench.lab.idle`; ``python -m bench.idle_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.idle_bench
        from .launch import run
    else:  # python bench/idle_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.idle")
