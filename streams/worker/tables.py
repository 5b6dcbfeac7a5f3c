"""The runs table, whose states follow their events' partition (session keying, issue 17).

Events are keyed by their session id when they have one (else by their run id), so all runs
of a session reach one partition and one worker. The runs table stays keyed by run id, so
Faust's partitioner (murmur2 of the table key) would write a session run's state to another
changelog partition than its events', and a restarted or rebalanced worker would recover it
on the wrong worker. Such a state is written (by the guarding agent, with its batch's records,
at :meth:`RunsTable.changelog_tp`) and deleted (through this table) on the partition of its
session id instead, which is the partition of its events: the topics are co-partitioned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import faust


class RunsTable(faust.Table):
    """run id -> RunState; a state with a session lives on its session's partition."""

    _routing: Any = None  # the state being deleted, while Faust picks a partition

    def on_key_del(self, key: Any) -> None:
        self._routing = self.data.get(key)  # still there: Faust deletes after this hook
        try:
            super().on_key_del(key)
        finally:
            self._routing = None

    def partition_for_key(self, key: Any) -> int | None:
        if not getattr(self._routing, "session_id", ""):
            return super().partition_for_key(key)  # None: the producer hashes the run id
        return self.changelog_tp(key, self._routing).partition

    def changelog_tp(self, key: bytes, state: Any) -> Any:
        """Where the changelog record of ``key`` with ``state`` goes: the partition the
        producer's partitioner (murmur2, as the gateways' and Java's) gives its session id,
        else its run id."""
        topic = self.changelog_topic.get_topic_name()
        session_id = getattr(state, "session_id", "")
        return self.app.producer.key_partition(topic, session_id.encode() or key)


def stored_values(table: Any) -> Callable[[bytes], Any]:
    """A read of ``table``'s memory store for the guarding batch, None for a missing key.

    Faust's ``Table.get`` calls its sensors on every read and raises, then catches, a
    KeyError for a missing key; the guarding batch reads a run or two per event and keeps
    neither, so it reads the store's dict (every table here is ``memory://``, and the agent
    writes the runs table's store the same way)."""

    def read(key: bytes) -> Any:
        return table.data.data.get(key)

    return read
