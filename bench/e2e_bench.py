"""End-to-end figures through one real worker on tansu or a 3-node Apache Kafka cluster.

The work is in :mod:`bench.lab.e2e`; ``python -m bench.e2e_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.e2e_bench
        from .launch import run
    else:  # python bench/e2e_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.e2e")
