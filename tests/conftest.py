"""Shared fixtures: databases (SQLite + PostgreSQL) and real services (tansu, workers)."""

import os

import pytest

from streams.core.engine import core_build

pytest_plugins = ["db_fixtures", "services"]


def pytest_configure(config: pytest.Config) -> None:
    # CI runs the core tests a second time against the mypyc build (setup.py); make sure
    # that run really imported the compiled modules rather than the sources beside it.
    expected = os.environ.get("LOOPGUARD_EXPECT_CORE")
    if expected and expected not in core_build():
        raise pytest.UsageError(f"expected the {expected} core, imported the {core_build()} one")


def pytest_report_header() -> str:
    brokers = os.environ.get("LOOPGUARD_TEST_BROKER", "tansu")
    return f"loopguard detector core: {core_build()}; integration brokers: {brokers}"
