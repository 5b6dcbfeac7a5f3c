"""``runBudget`` (issue 41): the agent's own per-run limit, read only by the saved estimate:
validated like every block, merged per field for an agent, and no part of ``config_version``
(no decision changes with it)."""

from __future__ import annotations

import pytest

from streams.core.config import ConfigError, resolve
from streams.core.fleet import FleetConfig
from streams.core.run_budget import RunBudget


def test_a_budget_resolves_and_leaves_the_version_alone() -> None:
    plain = resolve({"enabled": True})
    budgeted = resolve({"enabled": True, "runBudget": {"calls": 50, "tokens": 2_000_000}})
    assert plain.run_budget == RunBudget()
    assert budgeted.run_budget == RunBudget(calls=50, tokens=2_000_000)
    assert budgeted.version == plain.version


def test_an_agent_block_merges_its_budget_field_by_field() -> None:
    fleet = FleetConfig({"runBudget": {"calls": 50}}, {"coder": {"runBudget": {"tokens": 9}}})
    assert fleet.for_agent("coder").run_budget == RunBudget(calls=50, tokens=9)
    assert fleet.for_agent("other").run_budget == RunBudget(calls=50)


@pytest.mark.parametrize(
    ("block", "why"),
    [
        ({"calls": 0}, "tools.loopDetection.runBudget.calls: expected a whole number >= 1, got 0"),
        ({"tokens": "lots"}, "runBudget.tokens: expected a whole number >= 1, got 'lots'"),
        ({"iterations": 50}, "runBudget.iterations: unknown field (known: calls, tokens)"),
        (50, "tools.loopDetection.runBudget: expected an object, got int"),
    ],
)
def test_a_bad_budget_is_refused_naming_the_field(block: object, why: str) -> None:
    with pytest.raises(ConfigError, match=why.replace("(", r"\(").replace(")", r"\)")):
        resolve({"runBudget": block})
