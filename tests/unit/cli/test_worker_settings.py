"""``loopguard worker`` builds its Settings from the variables and its flags directly: the
flags win, the profile's defaults follow ``--broker-profile``, and nothing is written to the
process environment on the way."""

from __future__ import annotations

import os

import pytest

from streams.cli.main import build_parser
from streams.cli.worker_command import worker_settings
from streams.settings import PROFILES, Settings


def parse(*flags: str):
    return build_parser().parse_args(["worker", *flags])


def test_flags_win_over_variables_and_nothing_leaks_into_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("LOOPGUARD_BATCH_SIZE", "77")
    monkeypatch.delenv("LOOPGUARD_PROCESSING_GUARANTEE", raising=False)
    before = dict(os.environ)
    args = parse(
        "--broker", "kafka://h:1", "--db", "sqlite:///x.db", "--app-id", "fleet-a",
        "--topic-prefix", "pre", "--broker-profile", "tansu", "--partitions", "6",
        "--web-port", "7070", "--config", "fleet.json5", "--data-dir", "state",
    )  # fmt: skip
    settings = worker_settings(args)
    assert (settings.broker, settings.db_url) == ("kafka://h:1", "sqlite:///x.db")
    assert settings.app_id == "fleet-a"
    assert settings.topics.events == "pre.events" and settings.partitions == 6
    assert (settings.web_enabled, settings.web_port) == (True, 7070)
    assert (settings.config_file, settings.data_dir) == ("fleet.json5", "state")
    assert settings.batch_size == 77  # a variable no flag sets still counts
    tansu = PROFILES["tansu"]
    assert settings.profile == "tansu"
    assert settings.processing_guarantee == tansu.processing_guarantee
    assert settings.fetch_max_wait_ms == tansu.fetch_max_wait_ms
    assert dict(os.environ) == before


def test_the_profile_flag_beats_the_profile_variable(monkeypatch) -> None:
    monkeypatch.setenv("LOOPGUARD_BROKER_PROFILE", "tansu")
    monkeypatch.delenv("LOOPGUARD_PROCESSING_GUARANTEE", raising=False)
    settings = worker_settings(parse("--broker-profile", "kafka"))
    assert (settings.profile, settings.processing_guarantee) == ("kafka", "exactly_once")
    assert worker_settings(parse("--broker-profile", "kafka"), partitions=3).partitions == 3


def test_an_unknown_guarantee_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("LOOPGUARD_PROCESSING_GUARANTEE", "exactly_twice")
    with pytest.raises(ValueError, match="exactly_twice.*at_least_once or exactly_once"):
        Settings.from_env()


def test_an_unknown_control_delivery_is_refused_and_immediate_is_the_default(monkeypatch) -> None:
    monkeypatch.delenv("LOOPGUARD_CONTROL_DELIVERY", raising=False)
    assert Settings.from_env().control_delivery == "immediate"
    monkeypatch.setenv("LOOPGUARD_CONTROL_DELIVERY", "eventually")
    with pytest.raises(ValueError, match="eventually.*immediate or transactional"):
        Settings.from_env()


def test_watermarks_are_batched_unless_per_run_is_asked_and_others_are_refused(
    monkeypatch,
) -> None:
    monkeypatch.delenv("LOOPGUARD_WATERMARKS", raising=False)
    assert Settings.from_env().watermarks == "batched"
    monkeypatch.setenv("LOOPGUARD_WATERMARKS", "per_run")
    assert Settings.from_env().watermarks == "per_run"
    monkeypatch.setenv("LOOPGUARD_WATERMARKS", "sometimes")
    with pytest.raises(ValueError, match="sometimes.*batched or per_run"):
        Settings.from_env()
