"""Node and npm for the tests that build the TypeScript client and the OpenClaw plugin.

A missing or too old Node, or a failing npm step, fails the test with the step's output:
CI must never skip these suites silently.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from filelock import FileLock

NODE_MAJOR_MIN = 20


def node_and_npm(needed_by: str) -> tuple[str, str]:
    """Paths of ``node`` (>= NODE_MAJOR_MIN) and ``npm``; fails the test otherwise."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail(
            f"{needed_by} need node (>= {NODE_MAJOR_MIN}) and npm on PATH "
            f"(found node={node}, npm={npm})",
            pytrace=False,
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if not match or int(match.group(1)) < NODE_MAJOR_MIN:
        pytest.fail(f"node {version!r} is too old: need >= {NODE_MAJOR_MIN}", pytrace=False)
    return node, npm


def run_step(cmd: list[str], cwd: Path, timeout: float) -> str:
    """Run one preparation step and return its stdout; a failure fails the test with its output."""
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        pytest.fail(
            f"{' '.join(cmd)} (in {cwd}) did not finish in {timeout:.0f} s:\n"
            f"{error.stdout or ''}\n{error.stderr or ''}",
            pytrace=False,
        )
    if done.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} failed (exit {done.returncode}) in {cwd} "
            f"after {time.monotonic() - started:.0f} s:\n"
            f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}",
            pytrace=False,
        )
    return done.stdout


def build_lock() -> FileLock:
    """Held while a test process builds or installs Node packages: pytest-xdist workers share
    the checkout's node_modules, dist/ and build/, and OpenClaw's cache."""
    return FileLock(str(Path(tempfile.gettempdir()) / "loopguard-node-build.lock"))


def newest_mtime(paths: Iterable[Path]) -> float:
    newest = 0.0
    for path in paths:
        files = path.rglob("*") if path.is_dir() else [path]
        newest = max([newest, *(f.stat().st_mtime for f in files if f.is_file())])
    return newest


def stale(built: Path, *sources: Path) -> bool:
    """True when ``built`` is missing or older than any file under ``sources``."""
    return not built.exists() or built.stat().st_mtime < newest_mtime(sources)
