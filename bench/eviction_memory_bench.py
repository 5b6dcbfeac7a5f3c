"""Memory one eviction choice takes over a runs table a flood filled, and whose runs it
evicts (issue 40).

The work is in :mod:`bench.lab.eviction_memory`; ``python -m bench.eviction_memory_bench``
runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.eviction_memory_bench
        from .launch import run
    else:  # python bench/eviction_memory_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.eviction_memory")
