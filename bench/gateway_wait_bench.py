"""What in-time enforcement costs a gateway: before_tool latency with and without the wait.

The work is in :mod:`bench.lab.gateway_wait`; ``python -m bench.gateway_wait_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.gateway_wait_bench
        from .launch import run
    else:  # python bench/gateway_wait_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.gateway_wait")
