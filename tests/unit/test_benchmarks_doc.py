"""docs/benchmarks.md stays usable: every figure's command names a benchmark script that exists
with flags it takes, every figure in the table points at a command, and its links (to the
history's sections too) resolve."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "benchmarks.md"
LINKED = [PAGE, ROOT / "docs" / "benchmarks-history.md", ROOT / "deploy/helm/loopguard/README.md"]


def commands() -> list[str]:
    """The ``python bench/...`` commands in the page's code spans."""
    spans = re.findall(r"`([^`]*python bench/[^`]*)`", PAGE.read_text(encoding="utf-8"))
    return [span[span.index("python bench/") :] for span in spans]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.*)$", path.read_text(encoding="utf-8"), re.M)}


def test_the_page_has_commands() -> None:
    assert len(commands()) >= 10


def flags_by_script() -> dict[str, set[str]]:
    """Each script the page runs, with every flag its commands give it."""
    found: dict[str, set[str]] = {}
    for command in commands():
        words = shlex.split(command.replace("\\|", "|"))
        flags = {w.split("=", 1)[0] for w in words[2:] if w.startswith("--")}
        found.setdefault(words[1], set()).update(flags)
    return found


@pytest.mark.parametrize("script", sorted(flags_by_script()))
def test_each_command_runs_a_script_with_flags_it_takes(script: str) -> None:
    assert (ROOT / script).is_file(), script
    done = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    taken = set(re.findall(r"--[a-z][a-z-]*", done.stdout))
    missing = flags_by_script()[script] - taken
    assert not missing, f"{script} --help has no {sorted(missing)}"


def test_every_figure_in_the_table_cites_a_listed_command() -> None:
    text = PAGE.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| ([A-Z]\d) \|", text, re.M))
    cited = set(re.findall(r"\b([A-Z]\d)\b(?=[\],])", text))
    assert cited, "the table cites no command"
    assert cited <= listed, f"cited without a command: {sorted(cited - listed)}"


@pytest.mark.parametrize("path", LINKED, ids=lambda p: p.name)
def test_relative_links_resolve(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        assert resolved.exists(), f"{path.name}: {link}"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{path.name}: {link}"
