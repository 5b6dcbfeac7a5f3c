"""How each ``bench/<name>.py`` script starts: ``python -m bench.<name>`` from the repository
root and ``python bench/<name>.py`` from anywhere run the same code the same way.

Run as a script, Python puts ``bench/`` on the path instead of the repository root, so neither
the ``bench`` package nor the tests' Apache Kafka cluster tool (``tests.kafka_cluster``)
would import by name. The script registers those two packages by their location instead of
editing the path: ``streams`` still comes from wherever it is installed (an installed
compiled core, setup.py, is measured as such).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from typing import NoReturn

PACKAGES = ("bench", "tests")  # the repository's packages a benchmark imports by name


def run(script: str, body: str) -> NoReturn:
    """Exit with what ``main()`` of the module ``body`` returns; called by the script
    ``script`` (its ``__file__``) under ``if __name__ == "__main__"``."""
    if __name__ != "bench.launch":  # imported from a script's own directory
        register_packages(Path(script).resolve().parents[1])
    sys.exit(importlib.import_module(body).main())


def register_packages(root: Path) -> None:
    """Make ``bench`` and ``tests`` of the repository at ``root`` importable by name."""
    for name in PACKAGES:
        if name in sys.modules:
            continue
        where = root / name
        init = where / "__init__.py"
        if init.is_file():
            spec = importlib.util.spec_from_file_location(
                name, init, submodule_search_locations=[str(where)]
            )
        else:  # a namespace package (tests/ has no __init__.py)
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(where)]
        if spec is None:
            raise ImportError(f"no package {name} at {where}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        if spec.loader is not None:
            spec.loader.exec_module(module)
