"""Worker settings: environment parsing and secrets kept out of logs."""

from __future__ import annotations

import pytest

from streams.settings import Settings, Topics, redact_url


def test_environment_overrides_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGUARD_BROKER", "kafka://k1:9092;kafka://k2:9092")
    monkeypatch.setenv("LOOPGUARD_PARTITIONS", "12")
    monkeypatch.setenv("LOOPGUARD_TOPIC_PREFIX", "fleet7")
    monkeypatch.setenv("LOOPGUARD_BATCH_WINDOW_MS", "10")
    settings = Settings.from_env()
    assert settings.bootstrap_servers == ["k1:9092", "k2:9092"]
    assert settings.partitions == 12
    assert settings.topics == Topics.with_prefix("fleet7")
    assert settings.topics.control == "fleet7.control"
    assert settings.batch_window == pytest.approx(0.010)


def test_secrets_are_redacted_for_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGUARD_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("LOOPGUARD_SASL_USERNAME", "svc")
    monkeypatch.setenv("LOOPGUARD_SASL_PASSWORD", "s3cret-sasl")
    monkeypatch.setenv("LOOPGUARD_DB_URL", "postgresql+psycopg://lg:s3cret-db@db:5432/audit")
    settings = Settings.from_env()
    shown = repr(settings.redacted())
    assert "s3cret" not in shown
    assert "svc" in shown and "db:5432/audit" in shown
    options = settings.kafka_client_options()
    assert options["sasl_plain_password"] == "s3cret-sasl"  # passed to the client itself


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://u:p%40ss@h/db", "postgresql+psycopg://u:***@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("sqlite:///loopguard-data/audit.db", "sqlite:///loopguard-data/audit.db"),
        # A raw '@' in the password: the authority splits at its last '@' (issue 26).
        ("postgresql+psycopg://lg:p@ss@db/x", "postgresql+psycopg://lg:***@db/x"),
        ("postgresql://lg:a@b@c@[::1]:5432/x", "postgresql://lg:***@[::1]:5432/x"),
        # Secrets in the query string: the value of every sensitive key, any case.
        (
            "postgresql+psycopg://lg@db/x?password=s3cret&sslmode=require",
            "postgresql+psycopg://lg@db/x?password=***&sslmode=require",
        ),
        (
            "postgresql://db/x?user=a&PassWord=1&pwd=2&passwd=3&sslpassword=4&api_key=5"
            "&access_token=6&client_secret=7&sslkey=8",
            "postgresql://db/x?user=a&PassWord=***&pwd=***&passwd=***&sslpassword=***"
            "&api_key=***&access_token=***&client_secret=***&sslkey=***",
        ),
        ("sqlite:///a.db?pwd=x", "sqlite:///a.db?pwd=***"),
        ("https://hooks.example/h?token=abc&x=1#top", "https://hooks.example/h?token=***&x=1#top"),
        ("postgresql://u:p@h/x?pass%77ord=z", "postgresql://u:***@h/x?pass%77ord=***"),
        ("postgresql://u:@h/x?sslmode=disable", "postgresql://u:@h/x?sslmode=disable"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_every_url_in_the_logged_settings_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGUARD_DB_URL", "postgresql+psycopg://lg:a@b@db/x?password=qs-secret")
    monkeypatch.setenv("LOOPGUARD_BROKER", "kafka://svc:broker-secret@k1:9092;kafka://k2:9092")
    monkeypatch.setenv("LOOPGUARD_WEBHOOK_URL", "https://hooks.example/h?token=hook-secret")
    monkeypatch.setenv("LOOPGUARD_WEB_TOKEN", "web-secret")
    shown = repr(Settings.from_env().redacted())
    for secret in ("a@b", "qs-secret", "broker-secret", "hook-secret", "web-secret"):
        assert secret not in shown
    assert "kafka://svc:***@k1:9092;kafka://k2:9092" in shown


@pytest.mark.parametrize(
    ("profile", "guarantee"), [("kafka", "exactly_once"), ("tansu", "at_least_once")]
)
def test_the_processing_guarantee_follows_the_broker_profile(
    monkeypatch: pytest.MonkeyPatch, profile: str, guarantee: str
) -> None:
    """tansu has no transactions; Apache Kafka commits offsets, state and decisions at once."""
    monkeypatch.setenv("LOOPGUARD_BROKER_PROFILE", profile)
    monkeypatch.delenv("LOOPGUARD_PROCESSING_GUARANTEE", raising=False)
    assert Settings.from_env().processing_guarantee == guarantee
    monkeypatch.setenv("LOOPGUARD_PROCESSING_GUARANTEE", "at_least_once")
    assert Settings.from_env().processing_guarantee == "at_least_once"


def test_static_membership_reaches_the_faust_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOOPGUARD_GROUP_INSTANCE_ID (the Helm chart sets the pod name) is Faust's
    consumer_group_instance_id, which it gives aiokafka as group_instance_id; unset, the
    worker keeps dynamic membership (None, never an empty id)."""
    from streams.worker.bootstrap import build_app

    assert build_app(Settings()).conf.consumer_group_instance_id is None
    monkeypatch.setenv("LOOPGUARD_GROUP_INSTANCE_ID", "loopguard-worker-2")
    settings = Settings.from_env()
    assert settings.group_instance_id == "loopguard-worker-2"
    assert build_app(settings).conf.consumer_group_instance_id == "loopguard-worker-2"


def test_the_expiry_sweeps_interval_is_seconds_above_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env().expiry_interval == 10.0
    monkeypatch.setenv("LOOPGUARD_EXPIRY_INTERVAL", "1.5")
    assert Settings.from_env().expiry_interval == 1.5
    for bad in ("0", "-1"):
        monkeypatch.setenv("LOOPGUARD_EXPIRY_INTERVAL", bad)
        with pytest.raises(ValueError, match="LOOPGUARD_EXPIRY_INTERVAL=.* more than 0 seconds"):
            Settings.from_env()
