"""The expiry sweep's timer (streams/worker/agents.py) runs every ``LOOPGUARD_EXPIRY_INTERVAL``
seconds; registered on a stand-in for the Faust app that records the timers it is given."""

from __future__ import annotations

from types import SimpleNamespace

from streams.settings import Settings
from streams.worker.agents import WorkerAgents


class RecordingApp:
    """What WorkerAgents.register asks of a Faust app, recording the timers' intervals."""

    def __init__(self) -> None:
        self.timers: dict[str, float] = {}
        self.on_partitions_assigned = SimpleNamespace(connect=lambda receiver: None)

    def agent(self, topic: object, name: str, **options: object):
        return lambda body: body

    def timer(self, interval: float, name: str):
        self.timers[name] = interval
        return lambda body: body

    def task(self, body: object) -> object:
        return body


def timers(settings: Settings) -> dict[str, float]:
    app = RecordingApp()
    parts = SimpleNamespace(app=app, settings=settings, events_topic=object(), webhooks=None)
    WorkerAgents(parts).register()  # type: ignore[arg-type]
    return app.timers


def test_the_expiry_sweep_runs_every_expiry_interval() -> None:
    assert timers(Settings.for_profile("tansu", role="guard"))["expire_runs"] == 10.0
    quick = Settings.for_profile("tansu", role="guard", expiry_interval=2.5)
    assert timers(quick)["expire_runs"] == 2.5
