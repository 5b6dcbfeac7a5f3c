"""Run state figures, old codec (JSON of ``RunState.to_dict``) against the new binary form

The work is in :mod:`bench.lab.state`; ``python -m bench.state_bench`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.state_bench
        from .launch import run
    else:  # python bench/state_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.state")
