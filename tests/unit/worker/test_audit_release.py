"""A stop or rebalance waits for the guard's messages, never for the audit agents' (issue 26:
Faust's wait for unacknowledged messages never ended while the audit database failed)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from faust.transport import consumer as faust_consumer

from streams.worker import audit_release
from streams.worker.audit_release import release_audit_messages


@dataclass(eq=False)  # hashed by identity, as Faust's messages in its WeakSet
class Message:
    topic: str
    acked: bool = False


def test_only_the_audit_topics_unacknowledged_messages_are_released() -> None:
    guard, audit, done = Message("lg.events"), Message("lg.control"), Message("lg.control", True)
    consumer = SimpleNamespace(_unacked_messages={guard, audit, done})
    assert release_audit_messages(consumer, {"lg.control", "lg.deadletter"}) == 1
    assert consumer._unacked_messages == {guard, done}
    assert not audit.acked  # a rebalance: still acknowledged (and committed) once written


def test_on_a_stop_a_released_message_can_no_longer_be_committed() -> None:
    """Faust's take() acknowledges its batch when its agent is cancelled by the stop: the
    stop's last commit took records the database never had (lost from the trail)."""
    audit = Message("lg.control")
    consumer = SimpleNamespace(_unacked_messages={audit})
    assert release_audit_messages(consumer, {"lg.control"}, stopping=True) == 1
    assert audit.acked  # Consumer.ack skips it: never in the offsets it commits


def test_the_patched_wait_ends_while_an_audit_message_stays_unacknowledged(monkeypatch) -> None:
    monkeypatch.setattr(faust_consumer.Consumer, "wait_empty", faust_consumer.Consumer.wait_empty)

    async def original(self: Any) -> None:  # Faust's loop, reduced: wait while any is held
        for _ in range(100):
            if not self._unacked_messages:
                return
            await asyncio.sleep(0)
        raise AssertionError("the stop waited for the audit message")

    monkeypatch.setattr(audit_release, "_original_wait_empty", original)
    audit_release.audit_never_holds_a_stop({"lg.control"})
    held = Message("lg.control")
    consumer = SimpleNamespace(_unacked_messages={held}, app=SimpleNamespace(should_stop=False))
    asyncio.run(faust_consumer.Consumer.wait_empty(consumer))  # type: ignore[arg-type]
    assert not held.acked  # left unacknowledged: not committed, read again by the next owner
