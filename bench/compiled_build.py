"""Build the compiled wheel into a directory the benches import it from (setup.py's mypyc
build, what the image runs), and print how to run a bench on it.

The work is in :mod:`bench.lab.compiled_build`; ``python -m bench.compiled_build`` runs the same.
"""

if __name__ == "__main__":
    if __package__:  # python -m bench.compiled_build
        from .launch import run
    else:  # python bench/compiled_build.py: this directory is sys.path[0]
        from launch import run
    run(__file__, "bench.lab.compiled_build")
