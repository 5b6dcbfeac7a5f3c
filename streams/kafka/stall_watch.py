"""When a topic follower that hands nothing over is stuck behind records it should read.

kafka-python 3.x has had consumers that stop fetching one partition for good while polls
keep returning empty (upstream issues #3106 and #3131, both closed); a
gateway's control-topic follower stuck that way would let every wait for its runs' verdicts
fail open, silently. :class:`StallWatch` decides when to look (nothing handed over for
``seconds``, at most one look per ``seconds``) and which partitions are stuck: behind their
end offset at the same position at two looks in a row. The follower
(:class:`streams.kafka.reader.TopicFollower`) then reconnects from where it was.
"""

from __future__ import annotations

from collections.abc import Mapping


class StallWatch:
    """Looks for partitions a follower stopped reading (pure: the caller passes the time)."""

    def __init__(self, seconds: float, now: float) -> None:
        self.seconds = seconds
        self.progress_at = now  # when a record was last handed over (or the watch started)
        self.looked_at = now
        self.behind: dict[int, int] = {}  # partition -> position, at the last look
        self.looks = 0

    def progressed(self, now: float) -> None:
        """Records were handed over: nothing is stuck; look again only after a quiet spell."""
        self.progress_at = now
        self.behind = {}

    def due(self, now: float) -> bool:
        """Whether to compare positions with end offsets now."""
        quiet = now - self.progress_at >= self.seconds
        return quiet and now - self.looked_at >= self.seconds

    def stuck(self, positions: Mapping[int, int], ends: Mapping[int, int], now: float) -> list[int]:
        """Partitions behind their end offset that have not moved since the last look."""
        self.looked_at = now
        self.looks += 1
        behind = {p: at for p, at in positions.items() if at < ends.get(p, at)}
        stuck = sorted(p for p, at in behind.items() if self.behind.get(p) == at)
        self.behind = {} if stuck else behind
        return stuck
