"""The tools that render and validate deploy/helm/loopguard, fetched from the registries into a
cache outside the repository, as tests/kafka_cluster does for Kafka's jars.

Stdlib only:

* **helm**, built from the Go module proxy (``go install helm.sh/helm/v4/cmd/helm@VERSION``);
* **kubernetes-validate** (PyPI, hash-pinned in ``requirements.lock``) in a venv of its own:
  the Kubernetes API's JSON schemas, strict (an unknown field is an error), for the built-in
  kinds;
* **kubernetes-models** (npm, ``package-lock.json``): the KEDA and Prometheus Operator
  models, whose validators check the custom resources (ScaledObject, TriggerAuthentication,
  ServiceMonitor) that kubernetes-validate has no schema for.

``python3 tests/helm_tools/tools.py fetch`` fetches what is missing (.ci/run does, and fails
loudly when it cannot); ``tests/unit/test_helm_chart.py`` finds them with :func:`installed`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
HELM_MODULE = "helm.sh/helm/v4/cmd/helm"
HELM_VERSION = "v4.3.2"
VALIDATOR_LOCK = HERE / "requirements.lock"
MODELS_FILES = ("package.json", "package-lock.json", "validate_crds.mjs")
FETCH_TIMEOUT = 1200  # seconds for one tool's build or install


class ToolError(RuntimeError):
    """A tool could not be fetched or built; the message says which and why."""


@dataclass(frozen=True)
class Tools:
    helm: str  # the helm binary
    validate: str  # kubernetes-validate's console script, in its venv
    models: str  # the folder with validate_crds.mjs and its node_modules


def cache_dir() -> Path:
    """$LOOPGUARD_HELM_TOOLS_CACHE, else ~/.cache/loopguard/helm-tools."""
    env = os.environ.get("LOOPGUARD_HELM_TOOLS_CACHE")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "loopguard" / "helm-tools"


def _digest(*paths: Path) -> str:
    sha = hashlib.sha256()
    for path in paths:
        sha.update(path.read_bytes())
    return sha.hexdigest()[:12]


def planned(cache: Path | None = None) -> Tools:
    """Where each tool lives once fetched (a new lock or package file is a new folder)."""
    base = cache or cache_dir()
    validator = base / f"kubernetes-validate-{_digest(VALIDATOR_LOCK)}"
    models = base / f"kubernetes-models-{_digest(*(HERE / f for f in MODELS_FILES))}"
    return Tools(
        helm=str(base / f"helm-{HELM_VERSION}" / "helm"),
        validate=str(validator / "bin" / "kubernetes-validate"),
        models=str(models),
    )


def _ready(tools: Tools) -> dict[str, bool]:
    return {
        "helm": os.access(tools.helm, os.X_OK),
        "validate": (Path(tools.validate).parent.parent / ".complete").is_file(),
        "models": (Path(tools.models) / ".complete").is_file(),
    }


def installed(cache: Path | None = None) -> Tools | None:
    """The tools, when all three are in the cache; else None."""
    tools = planned(cache)
    return tools if all(_ready(tools).values()) else None


def _run(
    cmd: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> None:
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT, cwd=cwd, env=env
        )
    except FileNotFoundError:
        raise ToolError(f"{what}: {cmd[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{what}: timed out after {FETCH_TIMEOUT} s") from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        raise ToolError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(tail))


def _swap_in(tmp: Path, final: Path) -> None:
    """Move a finished folder into place (a concurrent fetch that won keeps its own)."""
    if final.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    try:
        tmp.rename(final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch_helm(tools: Tools) -> None:
    final = Path(tools.helm).parent
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="helm.tmp-", dir=final.parent))
    env = {**os.environ, "GOBIN": str(tmp), "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    _run(["go", "install", f"{HELM_MODULE}@{HELM_VERSION}"], "building helm", env=env)
    if not (tmp / "helm").is_file():
        raise ToolError(f"building helm: no binary in {tmp}")
    _swap_in(tmp, final)


def fetch_validator(tools: Tools) -> None:
    # A venv's scripts name its own path, so it is made where it stays; .complete marks it
    # whole (a half-made one from an interrupted fetch is made again).
    final = Path(tools.validate).parent.parent
    shutil.rmtree(final, ignore_errors=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(final)], "making kubernetes-validate's venv")
    pip = [str(final / "bin" / "python"), "-m", "pip", "install", "-q", "--no-input"]
    try:
        _run([*pip, "--require-hashes", "-r", str(VALIDATOR_LOCK)], "installing the validator")
    except ToolError:
        shutil.rmtree(final, ignore_errors=True)
        raise
    (final / ".complete").write_text("ok\n")


def fetch_models(tools: Tools) -> None:
    final = Path(tools.models)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="models.tmp-", dir=final.parent))
    for name in MODELS_FILES:
        shutil.copy2(HERE / name, tmp / name)
    _run(
        ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        "installing kubernetes-models",
        cwd=tmp,
    )
    (tmp / ".complete").write_text("ok\n")
    _swap_in(tmp, final)


def fetch(cache: Path | None = None) -> tuple[Tools, dict[str, float]]:
    """Fetch whatever is missing; returns the tools and seconds spent per tool fetched."""
    tools = planned(cache)
    ready = _ready(tools)
    spent: dict[str, float] = {}
    steps = (("helm", fetch_helm), ("validate", fetch_validator), ("models", fetch_models))
    for name, step in steps:
        if ready[name]:
            continue
        started = time.monotonic()
        step(tools)
        spent[name] = round(time.monotonic() - started, 1)
    if installed(cache) is None:
        raise ToolError(f"tools missing after fetch: {_ready(tools)}")
    return tools, spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "paths"])
    args = parser.parse_args()
    if args.command == "paths":
        print(json.dumps({**asdict(planned()), "ready": _ready(planned())}))
        return 0
    try:
        tools, spent = fetch()
    except ToolError as exc:
        print(f"helm tools: {exc}", file=sys.stderr)
        return 1
    for name, path in asdict(tools).items():
        took = f"fetched in {spent[name]} s" if name in spent else "cached"
        print(f"{name:<9} {path} ({took})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
