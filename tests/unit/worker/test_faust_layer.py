"""The Faust layer as one inventory (streams/worker/faust_layer.py): the methods the composition
root replaces are exactly the inventory's, in its order, each once, each fenced and proven by a
test that exists; docs/design.md lists the same."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from faust.transport import consumer as faust_consumer

from streams.worker import faust_layer
from streams.worker.patching import Patch, PatchError, replace

ROOT = Path(__file__).resolve().parents[3]
NAMES = [patch.name for patch in faust_layer.INVENTORY]

# In a fresh interpreter: every function attribute of every class of faust, aiokafka and mode
# before and after the composition root installs the layer; the changed ones, in the order
# the layer installed them.
INSTALLED = """
import asyncio, inspect, json, sys
from streams.settings import Settings
from streams.worker import faust_layer, patching

def classes():
    found = {}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("faust", "aiokafka", "mode") and module is not None:
            for _, cls in inspect.getmembers(module, inspect.isclass):
                found[cls] = dict(vars(cls))
    return found

settings = Settings.for_profile(sys.argv[1], processing_guarantee=sys.argv[2])
before = classes()
faust_layer.install(settings, asyncio.Lock())
changed = sorted(
    f"{cls.__name__}.{attribute}"
    for cls, was in before.items()
    for attribute in set(was) | set(vars(cls))
    if was.get(attribute) is not vars(cls).get(attribute)
)
print(json.dumps({"changed": changed, "order": list(patching.installed)}))
"""


@pytest.mark.parametrize(
    "profile, guarantee", [("kafka", "exactly_once"), ("tansu", "at_least_once")]
)
def test_the_installed_patches_are_the_inventory_in_its_order(profile: str, guarantee: str) -> None:
    import json

    done = subprocess.run(
        [sys.executable, "-c", INSTALLED, profile, guarantee],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    found = json.loads(done.stdout)
    expected = [
        n for n in NAMES if guarantee == "at_least_once" or n != "Recovery._build_highwaters"
    ]
    assert found["order"] == expected
    assert found["changed"] == sorted(expected)


def test_no_method_is_in_two_patches() -> None:
    assert len(set(NAMES)) == len(NAMES)
    assert len({(p.owner, p.attribute) for p in faust_layer.INVENTORY}) == len(NAMES)


def test_a_method_replaced_by_other_code_is_refused(monkeypatch) -> None:
    def someone_elses(self) -> None:
        return None

    patch = Patch(
        faust_consumer.Consumer, "wait_empty", faust_consumer.Consumer.wait_empty, "", "", ""
    )
    monkeypatch.setattr(faust_consumer.Consumer, "wait_empty", someone_elses)
    with pytest.raises(PatchError, match="Consumer.wait_empty is replaced already"):
        replace(patch, lambda self: None)


def test_every_patch_says_what_it_fixes_and_its_proof_exists() -> None:
    for patch in faust_layer.INVENTORY:
        assert len(patch.fixes) > 40, patch.name
        path, _, test = patch.proof.partition("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        assert test in tests, f"{patch.name}: no {patch.proof}"


def test_docs_list_the_inventory_in_its_order() -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text[text.index("## Faust patches") :]
    section = section[: section.index("\n## ", 1)]
    listed = re.findall(r"^\| \d+ \| `([A-Za-z_.]+)` \|", section, re.M)
    assert listed == NAMES
