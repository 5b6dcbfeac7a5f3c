"""Memory a worker's per-agent configs take (issue 40): new agent ids, agents with overrides

The work is in :mod:`bench.lab.config_memory`; ``python -m bench.config_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.config_bench
        from .launch import run
    else:  # python bench/config_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.config_memory")
