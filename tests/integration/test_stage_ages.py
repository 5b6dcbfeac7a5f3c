"""The per-stage event age on a real broker and worker: once the worker has guarded a run, its
/metrics shows each stage of the guarding path observed (fetched, handed, taken, decided,
published), one observation per fetch or batch; exactly once, its settling rounds too."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from services import Pipeline
from test_webhooks import wait_until

from streams.devtools.embedded_broker import free_port
from streams.observability.stage_ages import STAGES

pytestmark = pytest.mark.integration


def metric_counts(port: int, name: str) -> dict[str, float]:
    """Observations of histogram ``name`` on the worker's /metrics, by its ``stage`` label
    ("" for none); empty while the worker does not answer."""
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    except OSError:
        return {}
    return {
        sample.labels.get("stage", ""): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
        if sample.name.endswith("_count")
    }


def stage_counts(port: int) -> dict[str, float]:
    return metric_counts(port, "loopguard_event_stage_age_seconds")


def test_a_guarded_run_is_seen_at_every_stage(
    pipeline_factory: Callable[..., Pipeline], migrated_db_url: str
) -> None:
    pipeline = pipeline_factory(migrated_db_url)
    port = free_port()
    pipeline.start_worker(web_port=port)
    client = pipeline.client()
    pipeline.wait_ready(client)  # canary runs decided
    run = client.start_run(agent_id="staged")
    run.before_tool("read", {"path": "a"})
    wait_until(
        lambda: (
            set(stage_counts(port)) == set(STAGES)
            and all(count >= 1 for count in stage_counts(port).values())
        ),
        "every stage observed",
        pipeline,
    )
    settings = pipeline.settings
    if settings.processing_guarantee == "exactly_once" and settings.control_delivery == "immediate":
        # the run's batch settles in a round of its own or a later one: wait for one committed
        wait_until(
            lambda: metric_counts(port, "loopguard_settle_round_seconds").get("", 0) >= 1,
            "a settling round observed",
            pipeline,
        )
    else:  # no settling rounds at least once: the histogram is there, empty
        assert metric_counts(port, "loopguard_settle_round_seconds") == {"": 0}
