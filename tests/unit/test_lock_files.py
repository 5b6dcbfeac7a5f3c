"""The lock files (exact versions with hashes, used by .ci/run and compose/Dockerfile) stay in
step with pyproject.toml: every dependency is pinned, to a version its range allows, with a hash.

Regenerate both after changing a dependency (docs/operations.md, "Reproducible installs")."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# The gateway client's distribution is built from this repository (clients/python), never
# locked: its own dependencies are, as the project's.
CLIENT = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text(encoding="utf-8"))
LOCAL = canonicalize_name(CLIENT["project"]["name"])
PIN = re.compile(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==([^\s;\\]+)")


def pins(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) from a pip requirements file with ``--hash`` lines."""
    found: dict[str, tuple[str, list[str]]] = {}
    current = ""
    for line in lock.read_text(encoding="utf-8").splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match.group(1))
            found[current] = (match.group(2), [])
        elif current and line.strip().startswith("--hash=sha256:"):
            found[current][1].append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
    return found


RUNTIME = [
    spec
    for spec in [*PYPROJECT["project"]["dependencies"], *CLIENT["project"]["dependencies"]]
    if canonicalize_name(Requirement(spec).name) != LOCAL
]
LOCKS = {
    "requirements.lock": RUNTIME,
    "requirements-test.lock": [*RUNTIME, *PYPROJECT["project"]["optional-dependencies"]["test"]],
}


@pytest.mark.parametrize("lock_name", sorted(LOCKS))
def test_every_dependency_is_pinned_within_its_range_with_hashes(lock_name: str) -> None:
    locked = pins(ROOT / lock_name)
    assert locked, f"{lock_name}: no pins found"
    for spec in LOCKS[lock_name]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{lock_name}: {requirement.name} is not pinned"
        version, _ = locked[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{lock_name}: {requirement.name}=={version} is outside {requirement.specifier}"
        )
    unhashed = sorted(name for name, (_, hashes) in locked.items() if not hashes)
    assert not unhashed, f"{lock_name}: pins without a hash: {unhashed}"


def test_the_locks_hold_no_distribution_of_this_repository() -> None:
    for lock_name in LOCKS:
        assert LOCAL not in pins(ROOT / lock_name), f"{lock_name} pins {LOCAL}"


def test_the_runtime_lock_agrees_with_the_test_lock() -> None:
    runtime, test = pins(ROOT / "requirements.lock"), pins(ROOT / "requirements-test.lock")
    differ = {n: (v, test[n][0]) for n, (v, _) in runtime.items() if n in test and test[n][0] != v}
    assert not differ, f"the image would run other versions than CI tests: {differ}"
