"""Bounded load generator: many concurrent runs through N loopguard workers it starts itself.

The work is in :mod:`bench.lab.load`; ``python -m bench.load_gen`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.load_gen
        from .launch import run
    else:  # python bench/load_gen.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.load")
