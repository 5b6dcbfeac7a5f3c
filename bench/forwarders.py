"""The baselines of ``bench/throughput_bench.py``: processes that do nothing else.

The work is in :mod:`bench.lab.forwarders`; ``python -m bench.forwarders`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.forwarders
        from .launch import run
    else:  # python bench/forwarders.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.forwarders")
