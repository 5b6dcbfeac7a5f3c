"""Builds the compiled wheel (setup.py, ``LOOPGUARD_COMPILE=1``) into a directory the benches
import it from, and prints how to run a bench on it.

A bench measures whichever ``streams`` it imports, and the editable install of the README is
interpreted; the image (compose/Dockerfile) runs the compiled build. So that both are measured
the same way::

    python -m bench.compiled_build                      # builds, prints the PYTHONPATH
    cd /tmp && PYTHONPATH=<site> python <repo>/bench/e2e_bench.py --broker tansu ...

Run from outside the tree, the bench and the workers it starts (``python -P``) import the
compiled modules; their headers say which build ran ("build: compiled (mypyc)").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def default_out() -> Path:
    """A cache directory per commit (``-dirty`` when the tree has changes)."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    name = (head or "unknown") + ("-dirty" if dirty else "")
    return Path.home() / ".cache" / "loopguard" / "compiled" / name


def build(out: Path) -> Path:
    """The two wheels (the worker's, compiled, and the client's) installed into ``out/site``."""
    shutil.rmtree(out, ignore_errors=True)
    dist, site = out / "dist", out / "site"
    pip = [sys.executable, "-m", "pip", "-q"]
    env = {**os.environ, "LOOPGUARD_COMPILE": "1"}
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(dist), ".", "./clients/python"],
        cwd=ROOT, env=env, check=True,
    )  # fmt: skip
    wheels = sorted(str(wheel) for wheel in dist.glob("*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), *wheels], check=True)
    return site


def build_of(site: Path) -> str:
    """Which core a process with ``site`` first on its path imports (from outside the tree)."""
    probe = "from streams.core.engine import core_build; print(core_build())"
    result = subprocess.run(
        [sys.executable, "-P", "-c", probe],
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd=out_of_tree(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return result.stdout.strip()


def out_of_tree() -> str:
    return os.path.dirname(ROOT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compiled_build",
        description="Build loopguard with its detector core and guarding path compiled "
        "(setup.py, mypyc; needs a C compiler, about a minute on 2 cores) into a directory "
        "the benches can import it from, and print how to run one on it.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to build (~/.cache/loopguard/compiled/<commit>)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line instead")
    args = parser.parse_args(argv)
    out = args.out or default_out()
    if not args.json:
        print(f"building the compiled wheel into {out} (about a minute)", flush=True)
    try:
        site = build(out)
        which = build_of(site)
    except subprocess.CalledProcessError as exc:
        print(f"compiled_build: {' '.join(map(str, exc.cmd[:4]))} ... failed (exit "
              f"{exc.returncode}); see pip's output above", file=sys.stderr)  # fmt: skip
        return 1
    if "mypyc" not in which:
        print(f"compiled_build: {site} imports the {which} core, not the compiled one",
              file=sys.stderr)  # fmt: skip
        return 1
    if args.json:
        print(json.dumps({"site": str(site), "build": which}))
        return 0
    print(f"built: {which}, in {site}")
    print("run a bench on it from outside the tree, e.g.:")
    print(f"  cd {out_of_tree()} && PYTHONPATH={site} {sys.executable} {ROOT}/bench/e2e_bench.py")
    return 0
