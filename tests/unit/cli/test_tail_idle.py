"""What ``loopguard tail`` says while no decision comes (issue 41): where it reads and that it
waits, then, on a terminal, a line after each quiet minute (stderr only: stdout stays the
decisions). Driven by a hand-moved clock, so no test waits."""

from __future__ import annotations

from streams.cli.tail_command import IdleNotice, format_duration, waiting_line


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_the_first_line_says_where_tail_reads_and_that_it_waits() -> None:
    line = waiting_line("lg.control", "kafka://u:secret@broker:9092", from_beginning=False)
    assert line.startswith("following lg.control on kafka://u:***@broker:9092 from its end")
    assert "waiting for decisions" in line and "secret" not in line
    assert "from its oldest decision" in waiting_line("lg.control", "kafka://b:1", True)


def test_a_quiet_minute_is_said_once_a_minute_and_a_decision_restarts_it() -> None:
    clock = Clock()
    idle = IdleNotice("lg.control", every=60, clock=clock)
    clock.now += 59.5
    assert idle.due() is None
    clock.now += 1
    assert idle.due() == "still following lg.control: no new decision for 1m (0 shown so far)"
    assert idle.due() is None  # once per minute, however often it is asked
    clock.now += 60
    assert idle.due() == "still following lg.control: no new decision for 2m (0 shown so far)"
    idle.decision_shown()
    clock.now += 30
    assert idle.due() is None  # counted from the decision
    clock.now += 31
    assert idle.due() == "still following lg.control: no new decision for 1m (1 shown so far)"


def test_quiet_durations_read_as_people_say_them() -> None:
    assert [format_duration(s) for s in (45, 60, 150, 3600, 3900)] == [
        "45s", "1m", "2m", "1h 0m", "1h 5m",
    ]  # fmt: skip
