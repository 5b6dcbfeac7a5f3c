"""Failover: how long after a worker is SIGKILLed the fleet guards its runs again.

The work is in :mod:`bench.lab.failover`; ``python -m bench.failover_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.failover_bench
        from .launch import run
    else:  # python bench/failover_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.failover")
