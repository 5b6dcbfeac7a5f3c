"""Optional compiled build of the detector core and the guarding path: ``LOOPGUARD_COMPILE=1
pip install ./clients/python .``

The core modules are plain, fully typed Python; mypyc compiles them unchanged to C extensions
that run the same code in about 40% fewer instructions per event (docs/design.md, "Compiled
detector core"; docs/benchmarks-history.md, "Throughput"; ``bench/core_bench.py`` prints which
build it measured); so are the rest of the guarding path's per-event modules (decoding, the
batch, the state's bytes). Everything else (Faust wiring, storage, CLI) stays interpreted. Off
by default, and refused for editable installs, where compiled modules would sit beside their
sources and silently shadow every later edit.
Project metadata lives in ``pyproject.toml``. The gateway client's modules are left out of this
wheel: they ship in ``loopguard-client`` (``clients/python``), which this package depends on.
"""

from __future__ import annotations

import os
import sys
import tempfile
import tomllib
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# The pure detector core: everything LoopGuard.process runs per event. Compiled, the event
# classes check their fields' types when built (a wrongly typed event raises TypeError at
# construction instead of at encoding).
CORE_MODULES = [
    "streams/core/events.py",
    "streams/core/volatile.py",
    "streams/core/canonical.py",
    "streams/core/output_masks.py",
    "streams/core/status_results.py",
    "streams/core/call_identity.py",
    "streams/core/outcomes.py",
    "streams/core/hashing.py",
    "streams/core/call_record.py",
    "streams/core/held_call.py",
    "streams/core/streaks.py",
    "streams/core/ping_pong.py",
    "streams/core/history.py",
    "streams/core/detectors.py",
    "streams/core/failures.py",
    "streams/core/outcome_memory.py",
    "streams/core/progress.py",
    "streams/core/bursts.py",
    "streams/core/guard.py",
    "streams/core/decisions.py",
    "streams/core/loop_spend.py",
    "streams/core/model_notes.py",
    "streams/core/loop_watch.py",
    "streams/core/release_window.py",
    "streams/core/hold.py",
    "streams/core/operator_command.py",
    "streams/core/reorder.py",
    "streams/core/recent_decisions.py",
    "streams/core/session.py",
    "streams/core/usage.py",
    "streams/core/run_data.py",
    "streams/core/run_calls.py",
    "streams/core/run_results.py",
    "streams/core/run_handover.py",
    "streams/core/run_persistence.py",
    "streams/core/run_state.py",
    "streams/core/operator_release.py",
    "streams/core/engine.py",
]
# The rest of the guarding agent's per-event path (issue 42): decoding, the batch, the state's
# changelog bytes. Compiled with the core they cut ``process_batch`` from 76 to 66 us per event
# (``bench/batch_bench.py``; the core compiled either way, 95 with nothing compiled). Typed
# Python like the core; what they import from third parties (fastavro, msgpack) mypyc calls as
# Any. The event codec (streams/wire/avro.py) stays interpreted: it is the gateway client's
# public API, whose bad input must be a CodecError, not a compiled signature's TypeError.
GUARD_PATH_MODULES = [
    "streams/wire/names.py",
    "streams/wire/single_object.py",
    "streams/state/recent_format.py",
    "streams/state/state_format.py",
    "streams/state/state_encoder.py",
    "streams/service/records.py",
    "streams/service/processor.py",
    "streams/service/batch.py",
    # their record batches are compiled classes (records.Produced), which interpreted ones
    # cannot extend
    "streams/service/agent_cycles.py",
    "streams/service/incidents.py",
]
# mypyc type-checks what it compiles: orjson's own type hints in the build environment, and
# the other third-party modules the core's imports lead to (json5, yaml) typed as Any.
BUILD_REQUIRES = ["mypy>=1.11", "orjson>=3.9"]
MYPY_OPTIONS = ["--ignore-missing-imports"]

# The distribution that ships the gateway client's modules (and the schemas): listed there.
CLIENT_PROJECT = Path(__file__).parent / "clients" / "python" / "pyproject.toml"


def client_modules() -> tuple[set[str], set[str]]:
    """The dotted modules and the whole packages ``loopguard-client`` ships, each module's
    package ``__init__`` included (its ``pyproject.toml`` lists them)."""
    config = tomllib.loads(CLIENT_PROJECT.read_text(encoding="utf-8"))["tool"]["setuptools"]
    modules, packages = set(config["py-modules"]), set(config["packages"])
    for name in [*modules, *packages]:
        parts = name.split(".")
        modules.update(".".join([*parts[:i], "__init__"]) for i in range(1, len(parts)))
    return modules, packages


class WithoutClientModules(build_py):
    """Leaves ``loopguard-client``'s modules to that distribution: installed together, the
    two fill the same packages without a file in common."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules, packages = client_modules()
        return [
            (pkg, module, path)
            for pkg, module, path in super().find_package_modules(package, package_dir)
            if pkg not in packages and f"{pkg}.{module}" not in modules
        ]


CMDCLASS = {"build_py": WithoutClientModules}

if os.environ.get("LOOPGUARD_COMPILE") != "1":
    setup(cmdclass=CMDCLASS)
elif "editable_wheel" in sys.argv:
    sys.exit(
        "LOOPGUARD_COMPILE=1 builds wheels only: an editable install would leave compiled "
        "modules beside their sources, shadowing later edits. Use `pip install "
        "./clients/python .`."
    )
else:
    try:
        from mypyc.build import mypycify
    except ImportError:  # first pass of an isolated build: ask for mypy, then come back
        setup(setup_requires=BUILD_REQUIRES, cmdclass=CMDCLASS)
    else:
        # A fresh build directory each time: a reused ./build would ship modules that have
        # since left these lists.
        with tempfile.TemporaryDirectory(prefix="loopguard-mypyc-") as build_dir:
            setup(
                ext_modules=mypycify(
                    [*MYPY_OPTIONS, *CORE_MODULES, *GUARD_PATH_MODULES],
                    opt_level="3",
                    target_dir=build_dir,
                ),
                options={"build": {"build_base": build_dir}},
                cmdclass=CMDCLASS,
            )
