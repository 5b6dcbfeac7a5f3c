"""An operator's command in an export file (issue 43) is replayed in its place: the same
decisions as the core made live, the release's and the softened ones included."""

from __future__ import annotations

import io

from streams.core.events import RELEASE_DETECTOR, Action, Envelope
from streams.core.operator_command import OperatorCommand
from streams.replay.compare import replay_events
from streams.replay.event_file import parse_event_line, write_event_lines
from tests.core_helpers import SMALL_LIMITS, Run, guard

READ = {"path": "/etc/motd"}


def test_a_release_in_an_export_file_replays_to_the_same_decisions() -> None:
    live = guard(SMALL_LIMITS)
    run = Run(live)
    inputs: list = []
    for _ in range(4):  # warned, then blocked twice
        run.call("read", READ)
        run.result("read", READ, {"text": "same"})
    inputs += run.events
    release = OperatorCommand(
        Envelope(run.run_id, run.agent_id, "", 0, run.start_time + 99_000),
        "release", "rel-9", calls=4, reason="fine", released_by="ops",
    )  # fmt: skip
    live_decisions = list(run.decisions) + live.process(release)
    inputs.append(release)
    before = len(run.events)
    for _ in range(5):
        live_decisions += run.call("read", READ)
        live_decisions += run.result("read", READ, {"text": "same"}) or []
    inputs += run.events[before:]

    buffer = io.StringIO()
    write_event_lines(inputs, buffer)
    lines = buffer.getvalue().splitlines()
    assert '"kind": "operator_command"' in lines[len(inputs) - 11]
    parsed = [parse_event_line(line) for line in lines]
    assert parsed[len(inputs) - 11] == release

    replayed = replay_events(guard(SMALL_LIMITS), parsed)[run.run_id]
    assert replayed.decisions == live_decisions
    assert replayed.events == len(inputs) - 1  # the command is no event of the run
    assert any(d.detector == RELEASE_DETECTOR for d in replayed.decisions)
    assert any(d.action is Action.WARN and d.extra.get("would_be") for d in replayed.decisions)
