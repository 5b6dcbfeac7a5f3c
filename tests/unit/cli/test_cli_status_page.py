"""The status page's worker card names every health field once, in words (issue 27)."""

from __future__ import annotations

from streams.observability.metrics import WorkerMetrics
from streams.web.status_page import render_worker_card


def test_health_fields_are_named_once_in_words() -> None:
    snapshot = WorkerMetrics().snapshot()
    health = {"status": "ok", "consumer_lag": 0, "last_event_age_seconds": None}
    health |= {"broker_profile": "tansu", "some_new_field": 3}
    card = render_worker_card(snapshot, health, now_ms=0)
    assert card.count("consumer lag") == 1 and "consumer_lag" not in card
    assert "broker profile" in card and "broker_profile" not in card
    assert "some new field" in card and "some_new_field" not in card
