"""SIGTERM/SIGINT end a worker within its deadline whatever its stop waits for; a second
signal ends it at once (issue 26: a stop waiting on the audit database ignored both)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from streams.worker.shutdown import SHUTDOWN_TIMEOUT_STATUS

# A process whose own SIGTERM handling (like Faust's: on its event loop) starts a stop that
# never ends, with the deadline layered on top as the worker does.
HANGING_STOP = textwrap.dedent(
    """
    import asyncio, signal, sys
    from streams.worker.shutdown import ShutdownDeadline

    loop = asyncio.new_event_loop()
    stops = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: stops.append(loop.create_future()))
    ShutdownDeadline(float(sys.argv[1])).install()
    print("ready", flush=True)
    loop.run_forever()
    """
)


def start(deadline: float) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", HANGING_STOP, str(deadline)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_a_stop_that_hangs_ends_at_the_deadline_with_a_non_zero_status() -> None:
    process = start(deadline=0.5)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == SHUTDOWN_TIMEOUT_STATUS
    assert "did not stop within" in err or "Thread" in err


def test_a_second_signal_ends_it_at_once() -> None:
    process = start(deadline=3600)  # the deadline would never come within the test
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert "SIGTERM again: exiting now" in err
