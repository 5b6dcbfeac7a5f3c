"""SIGTERM and SIGINT end the worker within a deadline, whatever it is waiting for.

Faust stops on the first signal and ignores every later one; a stop that waits on something
that never comes (a database write, a thread stuck in a driver call, a broker away) left a
process that guarded nothing, kept its web port and ignored SIGTERM and SIGINT until a
SIGKILL (issue 26). Layered on Faust's own handling, the first signal arms a deadline
(``LOOPGUARD_SHUTDOWN_TIMEOUT``, 30 s by default): if the process is still up when it passes,
it exits with status 1. A second signal exits at once with 128 + the signal's number. Either
way the kernel releases the port, and offsets that were not committed are read again by the
next worker (at-least-once), as after a SIGKILL.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import faust

log = logging.getLogger("loopguard.worker")

SHUTDOWN_TIMEOUT_STATUS = 1
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ShutdownDeadline:
    """Arms, on the first SIGTERM/SIGINT, a timer that ends the process; a second ends it now."""

    def __init__(self, seconds: float, exit: Callable[[int], Any] = os._exit) -> None:
        self.seconds = seconds
        self.exit = exit
        self.timer: threading.Timer | None = None
        self.received = 0

    def install(self) -> None:
        """Add this handler on top of whatever handles the signals now. Python runs it beside
        asyncio's own signal handling (its wakeup fd), so Faust still stops as it did."""
        for signum in SIGNALS:
            signal.signal(signum, self.on_signal)

    def on_signal(self, signum: int, _frame: FrameType | None = None) -> None:
        # Python runs signal handlers in the main thread only, one inside another when a
        # second signal comes mid-handler: a count, never a lock (it would deadlock there).
        self.received += 1
        if self.received > 1:
            self._flush()
            sys.stderr.write(f"{signal.Signals(signum).name} again: exiting now\n")
            sys.stderr.flush()
            self.exit(128 + signum)
            return
        self.timer = threading.Timer(self.seconds, self.fire, args=(signum,))
        self.timer.daemon = True
        self.timer.name = "loopguard-shutdown-deadline"
        self.timer.start()
        log.info(
            "%s: stopping; the worker exits within %.0f s (LOOPGUARD_SHUTDOWN_TIMEOUT), "
            "at once on a second signal",
            signal.Signals(signum).name,
            self.seconds,
        )

    def fire(self, signum: int) -> None:
        log.error(
            "the worker did not stop within %.0f s of %s (LOOPGUARD_SHUTDOWN_TIMEOUT); "
            "exiting with status %d; its threads were:",
            self.seconds,
            signal.Signals(signum).name,
            SHUTDOWN_TIMEOUT_STATUS,
        )
        self._flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        self.exit(SHUTDOWN_TIMEOUT_STATUS)

    def _flush(self) -> None:
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()


def worker_with_deadline(seconds: float) -> type[faust.Worker]:
    """Faust's worker class (the app's ``Worker`` setting) that layers a
    :class:`ShutdownDeadline` of ``seconds`` over its signal handlers, right after it
    installs them: a subclass, not a patch of mode's Worker."""
    deadline = ShutdownDeadline(seconds)

    class DeadlineWorker(faust.Worker):
        def install_signal_handlers(self) -> None:
            super().install_signal_handlers()
            deadline.install()

    return DeadlineWorker
