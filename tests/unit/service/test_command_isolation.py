"""An operator's command that cannot be decoded or applied, whatever the exception, is
dead-lettered and the batch goes on (issue 40: no record ends the worker)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streams.kafka.operator_commands import build_command
from streams.service.processor import RunGuard
from streams.wire import operator_codec
from streams.wire.operator_codec import encode_command
from tests.core_helpers import Run
from tests.unit.service.test_batch_signing import TOPICS, Message, Worker, dead_letter_errors, loop


def command(worker: Worker, run_id: str) -> Message:
    value = encode_command(
        build_command(run_id, "agent", "release", release_id="r1", reason="ok", released_by="me")
    )
    worker.offset += 1
    return Message(TOPICS.events, 0, worker.offset, run_id.encode(), value)


def test_a_command_the_core_fails_on_is_dead_lettered_and_the_next_event_applies() -> None:
    worker = Worker(keys=None)
    run = Run(run_id="r", gateway_id="gw")
    events = [run.make_start(), *loop(run, 3)]
    worker.batch([worker.message(event, None) for event in events])
    before = worker.table[b"r"].stats.events

    def broken(cmd: object) -> list:
        raise RecursionError("maximum recursion depth exceeded")

    # Through the processor's seam: a patch of LoopGuard.command would not reach a compiled
    # processor (setup.py).
    worker.processor.guard = BrokenCommands(worker.processor.guard, broken)
    follow = run.make_call("read", {"path": "b.txt"})
    out = worker.batch([command(worker, "r"), worker.message(follow, None)])
    assert dead_letter_errors(out) == [
        "command failed: RecursionError: maximum recursion depth exceeded"
    ]
    assert worker.table[b"r"].stats.events == before + 1  # the call after it applied


def test_a_command_whose_decoding_raises_anything_is_dead_lettered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = Worker(keys=None)
    run = Run(run_id="r", gateway_id="gw")
    worker.batch([worker.message(run.make_start(), None)])

    def broken(value: bytes, max_size: int) -> object:
        raise MemoryError("out of memory")

    monkeypatch.setattr("streams.service.batch.decode_command", broken)
    assert operator_codec.decode_command is not broken
    out = worker.batch([command(worker, "r"), worker.message(run.make_call("ls", {}), None)])
    (error,) = dead_letter_errors(out)
    assert error.startswith("undecodable command: MemoryError")
    assert out.dead_letter_kinds == {"undecodable": 1}
    assert worker.table[b"r"].stats.events == 2


class BrokenCommands:
    """The processor's core with its ``command`` replaced."""

    def __init__(self, guard: RunGuard, command: Callable[[object], list]) -> None:
        self.config_for, self.state_for, self.apply = guard.config_for, guard.state_for, guard.apply
        self.command = command
