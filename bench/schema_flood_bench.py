"""Memory a flood of the schemas topic takes in a worker (issue 40): the bounded registry
against an unbounded one, and the topic's index at its bound.

The work is in :mod:`bench.lab.schema_memory`; ``python -m bench.schema_flood_bench`` runs the
same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.schema_flood_bench
        from .launch import run
    else:  # python bench/schema_flood_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.schema_memory")
