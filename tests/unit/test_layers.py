"""The layers of ``streams/`` as a test: every module is parsed with ``ast`` (nothing is run), so a
new import that goes up a layer, a cycle, or a private name borrowed from another module fails
here, with the module and line named.

Layers, bottom up: core < wire, state, observability, importers < service, kafka, audit <
webhooks, web, gateway, replay < worker (the Faust adapter) < devtools < cli. A module
imports its own package and the layers below; ``streams.settings`` may be imported by every
layer but core and wire. The core imports no Kafka, Faust, SQL or web library; the gateway client
imports neither Faust nor SQLAlchemy (checked statically and by importing it).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "streams"

RANK = {
    "core": 0,
    "importers": 1,
    "wire": 1,
    "state": 1,
    "observability": 1,
    "service": 2,
    "kafka": 2,
    "audit": 2,
    "webhooks": 3,
    "web": 3,
    "gateway": 3,
    "replay": 3,
    "worker": 4,
    "devtools": 5,
    "cli": 6,
}
SETTINGS = "streams.settings"
# layers that must not read the worker's settings
NOT_SETTINGS = {"core", "wire", "state", "service"}
FORBIDDEN = {
    "core": {"kafka", "aiokafka", "faust", "sqlalchemy", "alembic", "aiohttp"},
    "state": {"kafka", "aiokafka", "faust", "sqlalchemy", "alembic", "aiohttp"},
    "service": {"kafka", "aiokafka", "faust", "sqlalchemy", "alembic", "aiohttp"},
    "gateway": {"faust", "sqlalchemy", "alembic"},
}


@dataclass
class Module:
    name: str
    path: Path
    layer: str | None  # None: streams/__init__.py and streams/settings.py
    tree: ast.Module
    imports: list[tuple[str, int]] = field(default_factory=list)  # (module, line)
    third_party: list[tuple[str, int]] = field(default_factory=list)
    private: list[tuple[str, int]] = field(default_factory=list)  # "module.name", line


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if module.path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def load_modules() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        parts = name.split(".")
        layer = parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANK) else None
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        modules[name] = Module(name, path, layer, tree)
    for module in modules.values():
        aliases: dict[str, str] = {}  # local name -> streams module it is bound to
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    _record(module, modules, alias.name, node.lineno)
                    if alias.name.startswith("streams.") and alias.asname:
                        aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(module, node)
                if not source.startswith("streams"):
                    _record(module, modules, source, node.lineno)
                    continue
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in modules:  # ``from streams.wire import avro``
                        _record(module, modules, submodule, node.lineno)
                        aliases[alias.asname or alias.name] = submodule
                    else:
                        _record(module, modules, source, node.lineno)
                        if alias.name.startswith("_"):
                            module.private.append((f"{source}.{alias.name}", node.lineno))
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                module.private.append((f"{aliases[node.value.id]}.{node.attr}", node.lineno))
    return modules


def _record(module: Module, modules: dict[str, Module], name: str, line: int) -> None:
    if name == "streams" or name.startswith("streams."):
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        if name != module.name:
            module.imports.append((name, line))
    else:
        module.third_party.append((name.split(".")[0], line))


MODULES = load_modules()


def layer_violations(modules: dict[str, Module]) -> list[str]:
    found = []
    for module in modules.values():
        for target, line in module.imports:
            if target == SETTINGS:
                if module.layer in NOT_SETTINGS:
                    found.append(f"{module.name}:{line} imports {target}")
                continue
            other = modules[target].layer
            if module.layer is None or other is None or other == module.layer:
                continue
            if RANK[other] >= RANK[module.layer]:
                found.append(f"{module.name}:{line} ({module.layer}) imports {target} ({other})")
    return found


def library_violations(modules: dict[str, Module]) -> list[str]:
    return [
        f"{module.name}:{line} imports {library}"
        for module in modules.values()
        for library, line in module.third_party
        if library in FORBIDDEN.get(module.layer or "", set())
    ]


def private_violations(modules: dict[str, Module]) -> list[str]:
    return [f"{m.name}:{line} uses {name}" for m in modules.values() for name, line in m.private]


def import_cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), function-local imports
    included: deferring an import does not make a cycle go away."""
    graph = {name: sorted({t for t, _ in m.imports}) for name, m in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    return cycles


def test_every_module_is_in_a_layer() -> None:
    outside = [m.name for m in MODULES.values() if m.layer is None]
    assert sorted(outside) == ["streams", SETTINGS]
    assert {m.layer for m in MODULES.values()} - {None} == set(RANK)


def test_imports_only_go_down_the_layers() -> None:
    assert layer_violations(MODULES) == []


def test_core_and_gateway_keep_out_of_heavy_libraries() -> None:
    assert library_violations(MODULES) == []


def test_no_private_name_is_used_outside_its_module() -> None:
    assert private_violations(MODULES) == []


def test_no_import_cycles() -> None:
    assert import_cycles(MODULES) == []


@pytest.mark.parametrize(
    "modules, forbidden",
    [
        (
            [m for m in MODULES if MODULES[m].layer == "core"],
            FORBIDDEN["core"],
        ),
        (
            [m for m in MODULES if MODULES[m].layer in ("state", "service")],
            FORBIDDEN["service"],
        ),
        (["streams.gateway.client"], FORBIDDEN["gateway"]),
    ],
    ids=["core", "state and service", "gateway"],
)
def test_importing_loads_no_forbidden_library(modules: list[str], forbidden: set[str]) -> None:
    """What the static check cannot see: a library pulled in through another module."""
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    assert sorted(forbidden & set(out)) == []


def test_the_checks_catch_violations() -> None:
    """Each check fails on a planted violation (a copy of the tree's modules, one edited)."""
    planted = load_modules()
    config = planted["streams.core.config"]
    config.imports.append(("streams.cli.common", 1))
    config.third_party.append(("sqlalchemy", 1))
    config.private.append(("streams.wire.avro._own", 1))
    planted["streams.core.events"].imports.append(("streams.core.config", 1))
    planted["streams.core.config"].imports.append(("streams.core.events", 1))
    assert "streams.core.config:1 (core) imports streams.cli.common (cli)" in layer_violations(
        planted
    )
    assert "streams.core.config:1 imports sqlalchemy" in library_violations(planted)
    assert "streams.core.config:1 uses streams.wire.avro._own" in private_violations(planted)
    assert any(
        {"streams.core.config", "streams.core.events"} <= set(c) for c in import_cycles(planted)
    )
