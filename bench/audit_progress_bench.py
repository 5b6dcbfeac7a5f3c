"""The audit role's run-progress writes: CPU per watermark, runs appearing once or several times
per audit batch.

The work is in :mod:`bench.lab.audit_progress`; ``python -m bench.audit_progress_bench`` runs the
same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.audit_progress_bench
        from .launch import run
    else:  # python bench/audit_progress_bench.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.audit_progress")
