"""When a follower that hands nothing over reconnects: only for a partition behind its end
offset at the same position at two looks in a row, looking at most once per interval."""

from __future__ import annotations

from streams.kafka.stall_watch import StallWatch


def test_no_look_until_nothing_came_for_the_whole_interval() -> None:
    watch = StallWatch(5.0, now=0.0)
    assert not watch.due(4.9)
    assert watch.due(5.0)
    watch.progressed(now=6.0)
    assert not watch.due(10.0) and watch.due(11.0)


def test_a_partition_behind_and_not_moving_is_stuck_at_the_second_look() -> None:
    watch = StallWatch(5.0, now=0.0)
    ends = {0: 10, 1: 7}
    assert watch.stuck({0: 10, 1: 4}, ends, now=5.0) == []  # 1 may be fetching right now
    assert not watch.due(9.0)  # one look per interval
    assert watch.stuck({0: 10, 1: 4}, ends, now=10.0) == [1]
    assert watch.behind == {}  # the follower reconnects: start over


def test_a_partition_that_moved_or_caught_up_is_not_stuck() -> None:
    watch = StallWatch(5.0, now=0.0)
    assert watch.stuck({0: 3, 1: 4}, {0: 9, 1: 7}, now=5.0) == []
    assert watch.stuck({0: 5, 1: 7}, {0: 9, 1: 8}, now=10.0) == []  # 0 moved, 1 caught up
    assert watch.stuck({0: 5, 1: 7}, {0: 9, 1: 8}, now=15.0) == [0, 1]


def test_at_or_past_the_end_is_never_behind() -> None:
    # tansu reports a high watermark that can lag the last record: a position past it is fine
    watch = StallWatch(5.0, now=0.0)
    for now in (5.0, 10.0, 15.0):
        assert watch.stuck({0: 12, 1: 7}, {0: 11, 1: 7}, now=now) == []


def test_records_handed_over_forget_what_was_behind() -> None:
    watch = StallWatch(5.0, now=0.0)
    assert watch.stuck({0: 3}, {0: 9}, now=5.0) == []
    watch.progressed(now=6.0)
    assert watch.stuck({0: 3}, {0: 9}, now=11.0) == []
