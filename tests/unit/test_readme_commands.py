"""The README's first two commands: the first installs what the demo needs and no test tooling
(the gateway client's distribution and the worker's, no ``[test]`` extras) and runs the demo;
the second installs the test extras and runs the suites exactly as ``.ci/run``'s stage that
calls it does."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[list[str]]:
    """The README's first sh block, one list of shell words per line (comments dropped)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^```sh\n(.*?)^```", text, flags=re.M | re.S)
    assert block, "README.md lost its first sh block"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines()]


def installs(words: list[str]) -> list[str]:
    """What the ``pip install`` commands among ``words`` install."""
    found = []
    for i, word in enumerate(words):
        if word.endswith("/pip") and words[i + 1 : i + 2] == ["install"]:
            rest = words[i + 2 :]
            stop = rest.index("&&") if "&&" in rest else len(rest)
            found += [w for w in rest[:stop] if not w.startswith("-")]
    return found


def test_the_first_command_installs_the_demo_without_test_tooling() -> None:
    first = readme_commands()[0]
    assert installs(first) == ["./clients/python", "."]
    assert first[-2:] == [".venv/bin/loopguard", "demo"]


def test_the_test_command_installs_the_test_extras_and_runs_what_ci_runs() -> None:
    second = readme_commands()[1]
    assert installs(second) == ["./clients/python", ".[test]"]
    pytest_words = second[second.index("&&") + 1 :]
    assert pytest_words[:3] == [".venv/bin/python", "-m", "pytest"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    stage = re.search(r'^stage "tests \(README test command\)" (.+?)\\\n(.+)$', ci, re.M)
    assert stage, ".ci/run lost the stage that runs the README's test command"
    ran = shlex.split(stage.group(1) + stage.group(2))  # "$XDIST" stays a word: -n $XDIST
    ran = ran[ran.index(".venv/bin/python") :]
    readme = " ".join(pytest_words).replace("-n 3", "-n $XDIST")
    assert " ".join(ran).startswith(readme), (ran, pytest_words)
