"""The docs keep up with the code: every ``LOOPGUARD_*`` variable ``streams/`` reads is named in
docs/configuration.md, and the example configs there and in the README load with no warning
through the project's own loader."""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

import pytest

from streams.core.config_files import parse_config_text
from streams.core.fleet import fleet_from_document, fleet_warnings

ROOT = Path(__file__).resolve().parents[2]
STREAMS = ROOT / "streams"
CONFIGURATION = ROOT / "docs" / "configuration.md"
README = ROOT / "README.md"
PREFIX = "LOOPGUARD_"
# streams/settings.py's helpers, each called as helper("NAME", default) for LOOPGUARD_NAME.
SETTINGS_HELPERS = {"_env", "_int", "_float", "_positive"}
# A whole name, ending in a letter or digit: ``LOOPGUARD_SASL_*`` names a family, no variable.
LITERAL = re.compile(r"\bLOOPGUARD_[A-Z0-9_]*[A-Z0-9]\b")


def settings_variables() -> set[str]:
    """Names ``streams/settings.py`` builds with its helpers, read from its syntax tree."""
    tree = ast.parse((STREAMS / "settings.py").read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in SETTINGS_HELPERS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(PREFIX + node.args[0].value)
    return found


def literal_variables() -> dict[str, set[str]]:
    """Every literal ``LOOPGUARD_*`` name in streams/, with the files that spell it."""
    found: dict[str, set[str]] = {}
    for path in sorted(STREAMS.rglob("*.py")):
        for name in LITERAL.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def documented_variables() -> set[str]:
    return set(re.findall(r"LOOPGUARD_[A-Z0-9_]*[A-Z0-9]", CONFIGURATION.read_text("utf-8")))


def test_the_settings_parser_finds_the_variables_it_should():
    names = settings_variables()
    # a few that have always been there, so a broken parse cannot pass as "nothing to check"
    assert {"LOOPGUARD_BROKER", "LOOPGUARD_DB_URL", "LOOPGUARD_BATCH_WINDOW_MS"} <= names
    assert len(names) >= 20


def test_every_variable_settings_reads_is_documented():
    missing = settings_variables() - documented_variables()
    assert not missing, f"docs/configuration.md does not name: {sorted(missing)}"


def test_every_variable_named_in_streams_is_documented():
    documented = documented_variables()
    missing = {
        name: sorted(files) for name, files in literal_variables().items() if name not in documented
    }
    assert not missing, f"docs/configuration.md does not name: {missing}"


def json5_blocks(text: str) -> list[str]:
    return re.findall(r"^```json5\n(.*?)^```", text, flags=re.M | re.S)


def fleet_documents(path: Path) -> list[object]:
    """The fenced json5 blocks of ``path`` that are whole config documents (not fragments)."""
    docs = []
    for block in json5_blocks(path.read_text(encoding="utf-8")):
        try:
            doc = parse_config_text(block, path)
        except Exception:  # a fragment such as `{ plugins: ... }` of another tool, or a sketch
            continue
        if isinstance(doc, dict) and ("tools" in doc or "agents" in doc):
            docs.append(doc)
    return docs


def test_configuration_md_has_an_example_config():
    assert fleet_documents(CONFIGURATION), "docs/configuration.md lost its example config"


@pytest.mark.parametrize("path", [CONFIGURATION, README], ids=lambda p: p.name)
def test_example_configs_load_with_no_warning(path, caplog):
    for doc in fleet_documents(path):
        with caplog.at_level(logging.WARNING):
            fleet = fleet_from_document(doc)
        assert fleet_warnings(fleet) == []
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warned == [], f"{path.name}: the example config logs {warned}"
