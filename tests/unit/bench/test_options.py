"""The benches' shared command-line options (bench/lab/options.py)."""

from __future__ import annotations

from bench.lab.options import comma_list


def test_a_comma_list_option_names_known_choices_once_each() -> None:
    choices = ("loopguard", "echo", "faustecho")
    assert comma_list("loopguard, echo", choices) == ["loopguard", "echo"]
    assert comma_list("echo", choices) == ["echo"]
    for refused in ("", " , ", "loopguard,loopguard", "loopguard,txecho"):
        assert comma_list(refused, choices) is None
