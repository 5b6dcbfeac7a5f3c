"""A fleet of simulated agents through the real gateway clients: are verdicts in time?

The work is in :mod:`bench.lab.fleet`; ``python -m bench.fleet_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.fleet_bench
        from .launch import run
    else:  # python bench/fleet_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.fleet")
