"""A stop or a rebalance never waits for the audit database.

Before it stops, and before it gives up partitions in a rebalance, Faust waits until every
message an agent has taken is acknowledged (``Consumer.wait_empty``). The audit agents take
control-topic records and acknowledge them only once the database has them, so with the
database away, read-only or refusing, that wait never ended: SIGTERM left a worker that
guarded nothing and held its port for minutes, and a rebalance stalled every partition of
the worker, guard included (issue 26). Here the audit topics' messages are left out of that
wait: they stay unacknowledged, so their offsets are not committed and whoever owns the
partitions next reads and writes them again (writes are idempotent). The guard's own
messages are still waited for.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Collection
from typing import Any

from faust.transport import consumer as faust_consumer

from streams.worker.patching import Patch, replace

_original_wait_empty = faust_consumer.Consumer.wait_empty

WAIT_EMPTY = Patch(
    faust_consumer.Consumer,
    "wait_empty",
    _original_wait_empty,
    "e4662fe24f094819",
    fixes="a stop or a rebalance waited for every taken message to be acked, the audit "
    "agents' too: with the database away SIGTERM left a worker that guarded nothing (issue 26)",
    proof="tests/unit/worker/test_audit_release.py::"
    "test_the_patched_wait_ends_while_an_audit_message_stays_unacknowledged",
)
PATCHES = (WAIT_EMPTY,)


def release_audit_messages(
    consumer: Any, audit_topics: Collection[str], stopping: bool = False
) -> int:
    """Leave the audit topics' unacknowledged messages out of ``consumer``'s wait; returns
    how many were left out. ``stopping``: also make sure no later acknowledgement (a
    cancelled ``take`` acknowledges its batch) gets their offsets committed."""
    unacked = consumer._unacked_messages  # noqa: SLF001 - Faust 0.15.3's tracking set
    held = [m for m in list(unacked) if m.topic in audit_topics and not m.acked]
    for message in held:
        unacked.discard(message)
        if stopping:
            # Consumer.ack skips a message already marked: its offset is never committed.
            message.acked = True
    return len(held)


def audit_never_holds_a_stop(audit_topics: Collection[str]) -> None:
    """Patch ``Consumer.wait_empty``: the audit topics' messages are released first (see the
    module's docstring)."""
    topics = frozenset(audit_topics)
    stopped: weakref.WeakSet[Any] = weakref.WeakSet()  # consumers whose stop waited once

    @functools.wraps(_original_wait_empty)
    async def wait_empty(self: Any) -> None:
        stopping = bool(getattr(self.app, "should_stop", False))  # not a rebalance
        if stopping and self in stopped:
            return
        release_audit_messages(self, topics, stopping=stopping)
        if stopping:
            stopped.add(self)
        await _original_wait_empty(self)

    replace(WAIT_EMPTY, wait_empty)
