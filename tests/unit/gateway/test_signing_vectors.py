"""The signed-record vectors both gateway clients verify (clients/vectors/signing.json, issue 40):
still what the generator writes, and answered by the Python key ring as recorded (the
TypeScript client's test/signing.test.ts checks the same file)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from streams.wire.signing import KeyRing

VECTORS = Path(__file__).resolve().parents[3] / "clients" / "vectors"
DATA = json.loads((VECTORS / "signing.json").read_text(encoding="utf-8"))


def test_the_vectors_are_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_signing_vectors", VECTORS / "make_signing_vectors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fix = "run .venv/bin/python clients/vectors/make_signing_vectors.py"
    assert module.build() == DATA, f"signing.json is stale: {fix}"


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda case: case["name"])
def test_a_gateway_with_the_keys_answers_each_case_as_recorded(case: dict) -> None:
    ring = KeyRing.of(DATA["keys"])
    headers = [(name, value.encode()) for name, value in case["headers"].items()]
    value = bytes.fromhex(case["hex"])
    assert ring.check(headers, value) == case["check"]
    if case["name"].endswith(": signed"):
        assert [(n, v.decode()) for n, v in ring.headers(value)] == list(case["headers"].items())
