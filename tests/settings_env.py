"""Settings as a deployment artefact's environment alone gives them (compose, Helm)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from streams.settings import Settings


def settings_from_env(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``Settings.from_env`` over exactly ``env``: the test process's own ``LOOPGUARD_*``
    variables are cleared first, so none leaks into what a container would see."""
    for name in list(os.environ):
        if name.startswith("LOOPGUARD_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env()
