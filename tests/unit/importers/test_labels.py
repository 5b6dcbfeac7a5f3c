"""SWE-bench results files as outcome labels: the summary report (``resolved`` / ``resolved_ids``
and the other id lists), per-instance reports, unknown runs, and bad files refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from importer_helpers import write_json

from streams.importers.labels import LabelError, load_results, outcome_of


def test_a_summary_report(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "results.json",
        {
            "resolved_instances": 1,
            "completed_ids": ["a", "b"],
            "resolved": ["a"],
            "empty_error_patch_ids": ["c"],
        },
    )
    labels = load_results(path)
    assert labels == {"a": "resolved", "b": "unresolved", "c": "unresolved"}
    assert outcome_of("a", labels, None) == "resolved"
    assert outcome_of("z", labels, "resolved") == "unknown"  # the file decides when given


def test_resolved_ids_and_per_instance_reports(tmp_path: Path) -> None:
    ids = write_json(tmp_path / "ids.json", {"resolved_ids": ["a"], "unresolved_ids": ["b"]})
    assert load_results(ids) == {"a": "resolved", "b": "unresolved"}
    reports = write_json(
        tmp_path / "report.json", {"a": {"resolved": True}, "b": {"resolved": False}}
    )
    assert load_results(reports) == {"a": "resolved", "b": "unresolved"}


def test_without_results_the_trajectory_label_or_unknown() -> None:
    assert outcome_of("a", None, "unresolved") == "unresolved"
    assert outcome_of("a", None, None) == "unknown"


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not valid JSON"),
        ("[1]", "expected a JSON object"),
        ('{"total": 3}', "no `resolved` list"),
    ],
)
def test_bad_results_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(LabelError, match=message):
        load_results(path)
    with pytest.raises(LabelError, match="no such file"):
        load_results(tmp_path / "missing.json")
