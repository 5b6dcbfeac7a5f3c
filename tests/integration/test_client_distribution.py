"""``loopguard-client`` (clients/python) is a distribution of its own: built from the
repository's modules, it declares kafka-python and fastavro only, imports with nothing else
installed (no Faust, SQLAlchemy, aiohttp), and the worker package depends on it instead of
shipping the same modules again.

Both wheels are built with pip as a user would (an isolated build, so the build backend comes
from the package index or pip's cache), from a copy of the tree; the client is then imported by
an interpreter that sees only the client's wheel and its two dependencies."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIR = ROOT / "clients" / "python"
CLIENT = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text(encoding="utf-8"))["project"]
WORKER = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
CLIENT_DEPENDENCIES = {"kafka-python", "fastavro"}
HEAVY = {"faust", "aiokafka", "sqlalchemy", "alembic", "aiohttp", "psycopg", "mode", "avro"}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both wheels, built by ``pip wheel`` from a copy of the files the builds read."""
    tree = tmp_path_factory.mktemp("tree")
    for name in ("streams", "schemas", "migrations"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    shutil.copytree(
        CLIENT_DIR,
        tree / "clients" / "python",
        symlinks=True,
        ignore=shutil.ignore_patterns("build", "*.egg-info"),
    )
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(out),
            str(tree / "clients" / "python"),
            str(tree),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = {path.name.split("-")[0]: path for path in out.glob("*.whl")}
    assert set(found) == {"loopguard", "loopguard_client"}, found
    return found


def metadata(wheel: Path) -> tuple[str, list[Requirement]]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        headers = HeaderParser().parsestr(archive.read(name).decode())
    return headers["Name"], [Requirement(r) for r in headers.get_all("Requires-Dist") or []]


def files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {n for n in archive.namelist() if ".dist-info/" not in n}


def test_the_client_declares_kafka_python_and_fastavro_only(wheels: dict[str, Path]) -> None:
    name, requires = metadata(wheels["loopguard_client"])
    assert name == CLIENT["name"] == "loopguard-client"
    assert {canonicalize_name(r.name) for r in requires} == CLIENT_DEPENDENCIES
    # the same ranges as the worker's own: the two packages install together
    worker = {
        canonicalize_name(Requirement(r).name): Requirement(r) for r in WORKER["dependencies"]
    }
    for requirement in requires:
        assert requirement.specifier == worker[canonicalize_name(requirement.name)].specifier


def test_the_worker_depends_on_the_client_and_ships_none_of_its_files(
    wheels: dict[str, Path],
) -> None:
    _, requires = metadata(wheels["loopguard"])
    pinned = [r for r in requires if canonicalize_name(r.name) == "loopguard-client"]
    assert [str(r.specifier) for r in pinned] == [f"=={CLIENT['version']}"]
    client, worker = files(wheels["loopguard_client"]), files(wheels["loopguard"])
    assert not client & worker, sorted(client & worker)
    tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "streams").rglob("*.py")}
    tree |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "schemas").rglob("*.avsc")}
    assert tree - client - worker == set(), "modules or schemas neither wheel ships"


def test_the_client_imports_with_nothing_but_its_dependencies(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(wheels["loopguard_client"]),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # kafka-python and fastavro as installed here, and nothing else of this environment
    deps = tmp_path / "deps"
    deps.mkdir()
    for package in CLIENT_DEPENDENCIES:
        module = {"kafka-python": "kafka"}.get(package, package)
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.submodule_search_locations
        (deps / module).symlink_to(spec.submodule_search_locations[0])
    probe = f"""
import importlib.util, json, sys
sys.path[:0] = [{str(site)!r}, {str(deps)!r}]
from streams.gateway.client import GatewayClient, GatewayRun, RunAborted
tops = {{name.split(".")[0] for name in sys.modules}} - set(sys.stdlib_module_names)
print(json.dumps({{
    "tops": sorted(tops),
    "streams": sorted(n for n in sys.modules if n.startswith("streams.")),
    "faust_findable": importlib.util.find_spec("faust") is not None,
}}))
"""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert not seen["faust_findable"], "the probe sees this environment's packages"
    assert not HEAVY & set(seen["tops"]), seen["tops"]
    assert {"streams", "schemas", "kafka", "fastavro"} <= set(seen["tops"])
    # what the client imports is what its distribution lists, no more and no less
    shipped = {
        n.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for n in files(wheels["loopguard_client"])
        if n.startswith("streams/") and n.endswith(".py")
    }
    assert set(seen["streams"]) == shipped - {"streams"}
